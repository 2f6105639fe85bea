package drive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one fleet member run as a child process of the lab. Its output
// goes to a log file of its own; it dies with the lab (see sysProcAttr).
type proc struct {
	name    string
	bin     string
	args    []string
	logPath string
	ready   func(ctx context.Context) error // waits until it serves

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	paused  bool
	cut     *cpuCut // created by the first limitCPU
	cutPID  int     // the process the cut holds
	stopped bool    // stop was called: no restart
}

var _ controller = (*proc)(nil)

// start runs the process and waits until it is ready, or ctx ends, or it
// exits first (then the error quotes the end of its log).
func (p *proc) start(ctx context.Context) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return fmt.Errorf("drive: %s: stopped", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("drive: %s: log: %w", p.name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.mu.Unlock()
		return fmt.Errorf("drive: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done: // exited before it was ready: stop waiting
			cancel()
		case <-rctx.Done():
		}
	}()
	if err := p.ready(rctx); err != nil {
		select {
		case <-done:
			return fmt.Errorf("drive: %s exited during start (%v); its log ends:\n%s", p.name, cmd.ProcessState, tail(p.logPath, 2000))
		default:
		}
		return fmt.Errorf("drive: %s not ready: %w; its log ends:\n%s", p.name, err, tail(p.logPath, 2000))
	}
	return nil
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signalLocked(sig)
}

func (p *proc) signalLocked(sig syscall.Signal) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("drive: %s is not running", p.name)
	}
	select {
	case <-p.done:
		return fmt.Errorf("drive: %s has exited", p.name)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("drive: signal %s: %w", p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// pid is the running process's ID, or 0.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

func (p *proc) pause() error  { return p.signal(syscall.SIGSTOP) }
func (p *proc) resume() error { return p.signal(syscall.SIGCONT) }

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() error {
	p.mu.Lock()
	err := p.signalLocked(syscall.SIGKILL)
	done := p.done
	p.mu.Unlock()
	if err != nil {
		return err
	}
	<-done
	return nil
}

// restart starts the process again, with the same arguments, after a kill
// (or after it died), and waits until it is ready.
func (p *proc) restart(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		default:
			if err := p.kill(); err != nil {
				return err
			}
		}
	}
	return p.start(ctx)
}

// drain sends SIGTERM and waits for the process to exit, killing it after
// a minute; restart starts it again.
func (p *proc) drain(ctx context.Context) error {
	p.mu.Lock()
	err := p.signalLocked(syscall.SIGTERM)
	done := p.done
	p.mu.Unlock()
	if err != nil {
		return err
	}
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return errors.Join(fmt.Errorf("drive: %s did not exit after SIGTERM", p.name), p.kill())
}

// errLocalPartition: a local process shares the lab's network namespace.
var errLocalPartition = errors.New("drive: partitions need the compose fleet (-fleet compose): local processes share one network")

func (p *proc) partition([]controller) error { return errLocalPartition }
func (p *proc) heal() error                  { return nil }

// limitCPU puts the process in a cgroup of its own with a CPU quota of
// cores (0 lifts the quota).
func (p *proc) limitCPU(cores float64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("drive: %s is not running", p.name)
	}
	if p.cut == nil {
		if cores == 0 {
			return nil
		}
		cut, err := newCPUCut(fmt.Sprintf("levee-storm-%d-%s", os.Getpid(), p.name))
		if err != nil {
			return fmt.Errorf("drive: CPU cut of %s: %w", p.name, err)
		}
		p.cut = cut
	}
	if pid := p.cmd.Process.Pid; p.cutPID != pid {
		if err := p.cut.add(pid); err != nil {
			return fmt.Errorf("drive: CPU cut of %s: %w", p.name, err)
		}
		p.cutPID = pid
	}
	if err := p.cut.set(cores); err != nil {
		return fmt.Errorf("drive: CPU cut of %s: %w", p.name, err)
	}
	return nil
}

// stop ends the process for good: CPU cut lifted, resumed if paused, then
// SIGTERM and up to grace to drain, then SIGKILL. It waits for the exit and
// removes the cgroup.
func (p *proc) stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopped = true
	cmd, done, cut := p.cmd, p.done, p.cut
	if cut != nil {
		_ = cut.set(0)
	}
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
			_ = cmd.Process.Kill()
			<-done
		}
		t.Stop()
	}
	if cut != nil {
		return cut.remove()
	}
	return nil
}

// tail returns at most n bytes from the end of the file at path.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(buf, off)
	return string(buf[:k])
}

// Binaries are the fleet's programs: verifier, gateway, budgetd and levee
// (which runs the lab's embedded etcd), in one directory.
type Binaries struct{ Dir string }

var binaryNames = []string{"verifier", "gateway", "budgetd", "levee"}

func (b Binaries) path(name string) string { return filepath.Join(b.Dir, name) }

// Check reports a missing or non-executable program.
func (b Binaries) Check() error {
	var errs []error
	for _, n := range binaryNames {
		st, err := os.Stat(b.path(n))
		switch {
		case err != nil:
			errs = append(errs, err)
		case st.IsDir() || st.Mode().Perm()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s is not an executable file", b.path(n)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drive: binaries in %q: %w", b.Dir, err)
	}
	return nil
}

// BuildBinaries builds the fleet's programs from the module source at root
// (the directory holding Levee's go.mod) into dir with GoBuild.
func BuildBinaries(ctx context.Context, root, dir string) (Binaries, error) {
	pkgs := make([]string, 0, len(binaryNames))
	for _, n := range binaryNames {
		pkgs = append(pkgs, "./cmd/"+n)
	}
	if err := GoBuild(ctx, root, dir, pkgs...); err != nil {
		return Binaries{}, err
	}
	b := Binaries{Dir: dir}
	return b, b.Check()
}

// GoBuild runs `go build -o dir/` for pkgs in the module at moduleDir, as
// scripts/docker-build.sh builds the image's programs: static (CGO_ENABLED=0)
// and with -trimpath. Go's build cache then serves the lab's builds and the
// image's alike: the first build takes a minute, later ones seconds.
func GoBuild(ctx context.Context, moduleDir, dir string, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("drive: %w", err)
	}
	args := append([]string{"build", "-trimpath", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("drive: go build %s in %s: %w\n%s", strings.Join(pkgs, " "), moduleDir, err, out)
	}
	return nil
}

// ModuleRoot finds the Levee source tree holding dir (its go.mod names
// module github.com/leveehq/levee), walking up past the lab's own module;
// "" when dir is not in one.
func ModuleRoot(dir string) string {
	for d := dir; ; {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			switch {
			case hasModuleLine(string(data), "github.com/leveehq/levee"):
				return d
			case !hasModuleLine(string(data), "github.com/leveehq/levee/lab"):
				return ""
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

func hasModuleLine(gomod, module string) bool {
	for _, line := range strings.Split(gomod, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == module {
			return true
		}
	}
	return false
}

package drive

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuPeriodUs is the CFS period of a CPU cut: a quota of q cores is q × this
// much CPU time in every period.
const cpuPeriodUs = 100000

// cpuCut is a cgroup of its own limiting the CPU of the processes put in it:
// the cpu controller's CFS quota (cgroup v1 cpu.cfs_quota_us, or v2
// cpu.max).
type cpuCut struct {
	dir string
	v2  bool
}

// newCPUCut creates the cgroup name under the cpu controller's hierarchy:
// cgroup v2 when its root offers the cpu controller, else v1's cpu
// hierarchy. It needs the right to create cgroups (root, or a delegated
// subtree).
func newCPUCut(name string) (*cpuCut, error) {
	root, v2, err := cpuHierarchy()
	if err != nil {
		return nil, err
	}
	if v2 {
		// Children of the root get the cpu controller only if the root
		// hands it down.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2 at %s: enabling the cpu controller for children: %w", root, err)
		}
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating cgroup %s (CPU cuts need the right to create cgroups: run as root, or in a delegated cgroup): %w", dir, err)
	}
	return &cpuCut{dir: dir, v2: v2}, nil
}

// cpuHierarchy finds where cgroups with a cpu controller are made, from
// /proc/self/mountinfo.
func cpuHierarchy() (dir string, v2 bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	var v1dir, v2dir string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			v2dir = pf[4]
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				if o == "cpu" {
					v1dir = pf[4]
				}
			}
		}
	}
	if v2dir != "" {
		if ctl, err := os.ReadFile(filepath.Join(v2dir, "cgroup.controllers")); err == nil &&
			containsWord(string(ctl), "cpu") {
			return v2dir, true, nil
		}
	}
	if v1dir != "" {
		return v1dir, false, nil
	}
	return "", false, errors.New("cgroups: no cpu controller mounted (cgroup v1 cpu, or cgroup v2 offering cpu)")
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// add moves the process pid (all its threads) into the cgroup.
func (c *cpuCut) add(pid int) error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// set limits the cgroup to cores of CPU; 0 lifts the limit.
func (c *cpuCut) set(cores float64) error {
	quota := int64(cores * cpuPeriodUs)
	if cores > 0 {
		quota = max(quota, 1000) // the kernel's least quota is 1 ms
	}
	if c.v2 {
		v := "max " + strconv.Itoa(cpuPeriodUs)
		if cores > 0 {
			v = strconv.FormatInt(quota, 10) + " " + strconv.Itoa(cpuPeriodUs)
		}
		return os.WriteFile(filepath.Join(c.dir, "cpu.max"), []byte(v), 0)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cpuPeriodUs)), 0); err != nil {
		return err
	}
	v := "-1"
	if cores > 0 {
		v = strconv.FormatInt(quota, 10)
	}
	return os.WriteFile(filepath.Join(c.dir, "cpu.cfs_quota_us"), []byte(v), 0)
}

// remove deletes the cgroup; it must be empty (its processes exited).
func (c *cpuCut) remove() error {
	if err := os.Remove(c.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("drive: removing cgroup %s: %w", c.dir, err)
	}
	return nil
}

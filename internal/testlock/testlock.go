// Package testlock keeps the tests that saturate the machine's CPUs from
// running beside the tests that measure time, and gives a test that needs
// the cores to itself a way to say so.
//
// `go test ./...` runs several packages' test binaries at once. Three kinds
// of package take the machine lock in TestMain:
//
//   - exclusively, a package whose tests keep every core busy: the lab's
//     fleets (lab/, a module of its own), Argon2 hashed on every core, a
//     simulation;
//   - shared, a package whose tests measure time (a deadline, a lease, a
//     call in flight): beside the first kind it would measure them;
//   - none, the rest.
//
// The lock is an flock(2) on one file in the temporary directory, so it
// spans processes and is released when the test binary exits, however it
// exits.
//
// The lock is taken before testing.M.Run, where go test's -timeout has not
// started yet; a package waiting for the lab does not use up its timeout.
//
// A single test that loads the machine and judges what comes back by time
// (a load test at a fraction of measured capacity) calls Quiet: it holds
// the lock exclusively while it runs, so that no other package that takes
// the lock runs beside it.
package testlock

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// Name is the lock file's name in os.TempDir().
const Name = "levee-tests.lock"

// Shared blocks until no package holds the lock exclusively, then holds it
// shared until the process exits. Many packages may hold it shared at once.
func Shared() { lock(syscall.LOCK_SH) }

// Exclusive blocks until no other package holds the lock, then holds it
// exclusively until the process exits.
func Exclusive() { lock(syscall.LOCK_EX) }

// Quiet holds the lock exclusively until t ends: t needs the machine's
// cores to itself. In a package that took the lock shared it converts that
// lock, waiting for every other package holding it to finish, and hands it
// back shared when t ends; quiet tests of one process run one at a time.
func Quiet(t testing.TB) {
	t.Helper()
	quietMu.Lock()
	f := shared
	if f == nil {
		f = open()
	}
	t.Logf("testlock: waiting for the machine to itself")
	flock(f, syscall.LOCK_EX)
	t.Cleanup(func() {
		if f == shared {
			flock(f, syscall.LOCK_SH)
		} else {
			flock(f, syscall.LOCK_UN)
			f.Close()
		}
		quietMu.Unlock()
	})
}

var (
	quietMu sync.Mutex
	shared  *os.File // the file locked by Shared, if it was called
	held    []*os.File
)

func lock(how int) {
	f := open()
	flock(f, how)
	if how == syscall.LOCK_SH {
		shared = f
	}
	// f stays open, and so locked, until the process exits; keep it
	// reachable so that no finalizer closes it.
	held = append(held, f)
}

func open() *os.File {
	path := filepath.Join(os.TempDir(), Name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testlock: %v\n", err)
		os.Exit(2)
	}
	return f
}

func flock(f *os.File, how int) {
	var err error
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testlock: flock %s: %v\n", f.Name(), err)
		os.Exit(2)
	}
}

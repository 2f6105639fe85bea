// Package testlock keeps the tests that saturate the machine's CPUs from
// running beside the tests that measure time.
//
// `go test ./...` runs several packages' test binaries at once. The lab's
// tests (the lab module, lab/, its own `go test ./...`) start whole fleets
// of processes and drive them at their capacity for minutes; a gateway test
// that measures its fleet's capacity or waits for a call in flight would,
// beside them, measure the lab instead. Such packages take the machine lock
// in TestMain: the lab's heavy packages exclusively, timing-sensitive
// packages shared. The lock is an flock(2) on
// one file in the temporary directory, so it spans processes and is released
// when the test binary exits, however it exits.
//
// The lock is taken before testing.M.Run, where go test's -timeout has not
// started yet; a package waiting for the lab does not use up its timeout.
package testlock

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Name is the lock file's name in os.TempDir().
const Name = "levee-tests.lock"

// Shared blocks until no package holds the lock exclusively, then holds it
// shared until the process exits. Many packages may hold it shared at once.
func Shared() { lock(syscall.LOCK_SH) }

// Exclusive blocks until no other package holds the lock, then holds it
// exclusively until the process exits.
func Exclusive() { lock(syscall.LOCK_EX) }

func lock(how int) {
	path := filepath.Join(os.TempDir(), Name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testlock: %v\n", err)
		os.Exit(2)
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testlock: flock %s: %v\n", path, err)
		os.Exit(2)
	}
	// f stays open, and so locked, until the process exits; keep it
	// reachable so that no finalizer closes it.
	held = append(held, f)
}

var held []*os.File

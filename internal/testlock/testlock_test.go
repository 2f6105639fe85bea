package testlock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestExclusiveExcludesShared checks that a held exclusive lock refuses a
// shared one taken through another open file, as it refuses another process.
func TestExclusiveExcludesShared(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	Exclusive()
	f, err := os.Open(filepath.Join(dir, Name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err != syscall.EWOULDBLOCK {
		t.Fatalf("a shared lock beside the exclusive one: err %v, want EWOULDBLOCK", err)
	}
}

// TestQuietExcludesOthers: while a quiet test runs, no other process may
// take the lock, shared or not; when it ends, a package that held the lock
// shared holds it shared again.
func TestQuietExcludesOthers(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	try := func(how int) error { return tryLock(t, dir, how) }
	t.Run("quiet", func(t *testing.T) {
		Quiet(t)
		if err := try(syscall.LOCK_SH); err != syscall.EWOULDBLOCK {
			t.Errorf("a shared lock beside a quiet test: err %v, want EWOULDBLOCK", err)
		}
	})
	if err := try(syscall.LOCK_EX); err != nil {
		t.Errorf("an exclusive lock after the quiet test ended: %v, want it free", err)
	}
}

// TestQuietConvertsShared: in a package that holds the lock shared, a quiet
// test holds it exclusively and gives it back shared.
func TestQuietConvertsShared(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	try := func(how int) error { return tryLock(t, dir, how) }
	Shared()
	if err := try(syscall.LOCK_SH); err != nil {
		t.Fatalf("a second shared lock: %v, want it granted", err)
	}
	t.Run("quiet", func(t *testing.T) {
		Quiet(t)
		if err := try(syscall.LOCK_SH); err != syscall.EWOULDBLOCK {
			t.Errorf("a shared lock beside a quiet test: err %v, want EWOULDBLOCK", err)
		}
	})
	if err := try(syscall.LOCK_SH); err != nil {
		t.Errorf("a shared lock after the quiet test: %v, want it granted", err)
	}
	if err := try(syscall.LOCK_EX); err != syscall.EWOULDBLOCK {
		t.Errorf("an exclusive lock after the quiet test: err %v, want EWOULDBLOCK (the package holds it shared again)", err)
	}
}

// tryLock tries, without waiting, to lock dir's lock file through a file
// of its own, as another process would, and lets go at once.
func tryLock(t *testing.T, dir string, how int) error {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, Name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
}

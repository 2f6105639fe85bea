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

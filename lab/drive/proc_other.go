//go:build !linux

package drive

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's; elsewhere
// Fleet.Close is what stops the members.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

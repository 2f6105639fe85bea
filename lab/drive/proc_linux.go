package drive

import "syscall"

// sysProcAttr makes a child die with the lab: a fleet member must never
// outlive the experiment that started it, least of all a paused one.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

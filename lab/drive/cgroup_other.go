//go:build !linux

package drive

import "errors"

// cpuCut needs Linux cgroups; elsewhere the cpu trigger is refused.
type cpuCut struct{}

func newCPUCut(string) (*cpuCut, error) {
	return nil, errors.New("CPU cuts need Linux cgroups; use -fleet compose (docker update --cpus)")
}
func (*cpuCut) add(int) error     { return nil }
func (*cpuCut) set(float64) error { return nil }
func (*cpuCut) remove() error     { return nil }

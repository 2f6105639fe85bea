package residentheap

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/verify"
)

func TestDefaultBudget(t *testing.T) {
	const (
		mib  = int64(1) << 20
		host = 8192 * mib
	)
	meminfo := fmt.Sprintf("MemTotal:       %d kB\nMemFree:         1234 kB\n", host>>10)
	tests := []struct {
		name             string
		v2, v1, meminfo  string // "" means the file is absent
		want             int64
		wantSource       string
		wantNoMemoryInfo bool
	}{
		{name: "cgroup v2 limit", v2: "268435456\n", meminfo: meminfo, want: 64 * mib, wantSource: "half of cgroup v2 memory.max 256MiB less 128MiB headroom"},
		{name: "cgroup v2 max", v2: "max\n", meminfo: meminfo, want: (host/2 - 64*mib) / 2, wantSource: "half of (half of host MemTotal 8GiB less 64MiB)"},
		{name: "cgroup v1 limit", v1: "536870912\n", meminfo: meminfo, want: 192 * mib, wantSource: "cgroup v1 memory.limit_in_bytes 512MiB"},
		{name: "cgroup v1 unlimited", v1: "9223372036854771712\n", meminfo: meminfo, want: (host/2 - 64*mib) / 2, wantSource: "half of host"},
		{name: "limit above the host's memory", v2: fmt.Sprint(2 * host), meminfo: meminfo, want: (host/2 - 64*mib) / 2, wantSource: "half of host"},
		{name: "limit below the headroom", v2: fmt.Sprint(100 * mib), meminfo: meminfo, want: 0, wantSource: "cgroup v2 memory.max 100MiB"},
		{name: "garbage limit", v2: "lots", meminfo: meminfo, want: (host/2 - 64*mib) / 2, wantSource: "half of host"},
		{name: "limit without meminfo", v2: "1073741824", want: 448 * mib, wantSource: "cgroup v2 memory.max 1GiB"},
		{name: "nothing readable", wantNoMemoryInfo: true},
		{name: "meminfo without MemTotal", meminfo: "MemFree: 1 kB\n", wantNoMemoryInfo: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, content string) string {
				p := filepath.Join(dir, name)
				if content != "" {
					if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return p
			}
			f := memoryFiles{CgroupV2: write("memory.max", tt.v2), CgroupV1: write("memory.limit_in_bytes", tt.v1), MemInfo: write("meminfo", tt.meminfo)}
			got, source, err := defaultBudget(f)
			if tt.wantNoMemoryInfo {
				if !errors.Is(err, ErrNoMemoryInfo) {
					t.Fatalf("err = %v, want ErrNoMemoryInfo", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(source, tt.wantSource) {
				t.Errorf("budget = %d (%s), source %q; want %d (%s), source containing %q",
					got, bytesize.Size(got).Approx(), source, tt.want, bytesize.Size(tt.want).Approx(), tt.wantSource)
			}
		})
	}
}

// The soft memory limit is twice the arrays the budget lets live plus the
// base: the 256 MiB container (budget 64 MiB) with four workers at the 64 MiB
// policy gets 192 MiB, not the 576 MiB that OOM-killed it.
func TestKeepWithinBudget(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	policy := int64(verify.DefaultPolicy().Params.Memory) << 10
	if got, want := Keep(4, policy, 64<<20), int64(192<<20); got != want {
		t.Errorf("with a 64 MiB budget: limit %d MiB, want %d MiB", got>>20, want>>20)
	}
	if got, want := Keep(4, policy, 0), int64(576<<20); got != want {
		t.Errorf("without a budget: limit %d MiB, want %d MiB", got>>20, want>>20)
	}
	if got, want := Keep(1, policy, math.MaxInt64/2), int64(192<<20); got != want {
		t.Errorf("with a budget above the workers' need: limit %d MiB, want %d MiB", got>>20, want>>20)
	}
}

// Package bench measures Levee across package boundaries, with real Argon2
// and a real verifier.Server on 127.0.0.1:0. It contains no library code: its
// benchmarks live in _test.go files and run only with -bench, so
// `go test ./...` merely compiles them.
//
// What it measures:
//
//   - BenchmarkSaturation: hashes per second with every core busy, Argon2id
//     at m=64 MiB, t=3 and p=4 or p=1, once as argon2.IDKey called directly
//     from GOMAXPROCS goroutines (via=inprocess) and once as Verify calls
//     through gRPC to a verifier with Workers = GOMAXPROCS and a queue that
//     never empties (via=grpc). It also reports process CPU and minor page
//     faults per hash, which is where the cost of fresh Argon2 pages shows.
//   - BenchmarkRefusal: process CPU (getrusage user+sys) per request refused
//     at arrival with RESOURCE_EXHAUSTED ("queue full"), against a gRPC health
//     Check on the same server as the transport baseline, plus the refusal
//     decision alone (workpool.Pool.Submit) and the Verify handler alone.
//     Client and server share the process, so every gRPC figure includes
//     both ends; the difference to the baseline is the refusal's own cost.
//   - BenchmarkHashAfterIdle: the page faults and system time of one hash
//     right after the process sat idle (LEVEE_BENCH_IDLE, default 0s and
//     2m30s), which shows whether the runtime handed the freed Argon2
//     arrays back to the OS meanwhile.
//
// BenchmarkSaturation and BenchmarkRefusal also compare the process's CPU
// time with the busy time of the whole machine (/proc/stat) and log
// "WARNING: other processes used ..." when something else ran meanwhile;
// scripts/bench-saturation.sh and scripts/bench-refusal.sh drop those
// results and measure again.
//
// The Go runtime settings are process-wide, so the heap mode is chosen per
// invocation: LEVEE_BENCH_HEAP=resident applies residentheap.Keep
// (as cmd/verifier does by default) before any benchmark runs; unset or
// "default" leaves GOGC and the memory limit alone. The mode is printed as
// a "heap:" configuration line in the benchmark output, so benchstat can
// tell the two apart. docs/benchmarks.md has the commands and the results.
package bench

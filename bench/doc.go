// Package bench holds the end-to-end benchmarks of `make bench`: the real manager binary, run
// as a subprocess against an envtest control plane, a throwaway Postgres and the Coolify
// simulator served over HTTP with no added latency. Each benchmark plays one scenario per
// iteration and prints its figures next to the targets of docs/benchmarks.md; a missed target
// is reported, not failed, because the figures depend on the machine. A scenario that breaks
// (a bot never bound, a slot never free) fails the benchmark.
//
// The package holds no code outside its tests; `go test ./bench/` alone runs only the unit
// tests of the measuring helpers, `go test -run '^$' -bench . ./bench/` the scenarios.
package bench

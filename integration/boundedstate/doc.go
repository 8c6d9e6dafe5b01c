// Package boundedstate checks that what a locker keeps after its locks are
// released does not grow with the distinct keys it has ever locked: for
// redislock, redlock, zklock, etcdlock and memlock, thousands of keys are
// each acquired and released once, and the servers' state under the
// locker's prefix — and the Locker's own goroutines and heap — must come
// back to where they started, or stay within a documented idle window
// (redislock's and redlock's token counters, which expire CounterIdle after
// their last grant). Leases dropped without a release must leave nothing
// either once they have run out. The long soaks, with their numbers, are
// benchmarks (benchmarks/*, BenchmarkDistinctKeys).
package boundedstate

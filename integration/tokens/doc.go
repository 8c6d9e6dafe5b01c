// Package tokens checks the order of fencing tokens the Redis lockers
// mint, on real servers: strictly increasing and exact across the numeric
// edges (2^53, digit carries, the ceiling), after Heal (the clock offset
// stored with the counter), with malformed or evicted counters, under
// concurrent acquires and hand-overs, and across a replica promotion or a
// Redlock node restart that loses a grant. Controls strip the heal offset
// by hand to show the failovers bite.
package tokens

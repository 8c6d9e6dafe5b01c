// Package worker is the inventory's lock holder: a loop that sells one unit
// of an item at a time under its lock — acquire "sku:<sku>", read the stock
// (claiming the item with the lease's token), work briefly, write the stock
// less one — the read-modify-write a lock exists for.
//
// A worker reports what it does as [Event]s, one JSON object per line on
// its standard output, for the demo that runs it as a process: lease
// acquired, read, written, refused, lease released or lost, with tokens and
// times. Gated (Config.Gate), it waits before its first sale (reporting
// that it is ready), after each grant and after each read until a line
// arrives on its standard input: the demo's acknowledgement.
// That lets the demo freeze the process with SIGSTOP at exactly one point —
// after the read, before the write — and fix the order of the accesses
// around it (see package demo).
//
// The write goes out with the lease's token but without the lease context's
// cancellation. A holder cannot rely on that cancellation: a pause that
// lands after its last look at the context (or while the write is on its
// way) lets the write through all the same, so the cancellation only
// narrows the window. The demo freezes the worker at a fixed point, so it
// removes the race instead: after a pause the write always goes out, as it
// does whenever a real pause lands after the check. Only the service's token
// check can stop it.
//
// [Main] is the `worker` subcommand; [Worker.Run] is the loop, for tests.
package worker

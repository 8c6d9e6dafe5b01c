// Package demo is the inventory demo: worker processes selling one item
// under a lock, one of them frozen with SIGSTOP between its read and its
// write for longer than its lease, once with fencing off and once with it
// on, and the report of what each run sold.
//
// # The schedule
//
// Every worker runs gated (see package worker): it starts selling when the
// demo lets it, once every worker is up, so all of them queue for the lock
// from the start; after each read it reports the read and waits for the
// demo's acknowledgement, which the demo sends at once — except for the victim (w1), at its first read after FreezeAfter
// sales with stock left: the demo stops it with SIGSTOP, waits until the
// kernel reports it stopped, and only then acknowledges, so the ack waits in
// the pipe and the worker can only have read, not written. The whole
// process is frozen, its lease keep-alive included, as a GC pause or a VM
// freeze would freeze it. The demo resumes it with SIGCONT once Pause has
// passed and another worker has sold (so the interleaving has happened;
// at most MaxPause). The victim then writes the stock it computed before the
// pause. Without fencing that write is accepted and undoes the sales made
// meanwhile: the oversell is certain, not likely. With fencing it carries a
// token below the one the item has seen since, and is refused.
//
// [Run] runs one pass; [Main] is the demo subcommand: both passes, the
// table, the counters, the verdict and the optional timeline
// ([WriteTimeline]). Every worker process has ended when Run returns, and a
// worker dies with the demo (Linux parent-death signal).
package demo

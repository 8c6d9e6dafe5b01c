// Package redlock runs the Redlock algorithm over N independent Redis
// nodes — and hands out fencing tokens that grow with every grant, which
// Redlock alone cannot do.
//
// # The lock
//
// An acquire asks every node at once to SET NX PX the lock key with a
// grant id, each call bounded by a node timeout. It succeeds only with a
// quorum (N/2+1) of nodes and while the remaining validity, TTL − elapsed −
// drift (drift = TTL·DriftFactor + DriftMin, default 1% + 2ms), is
// positive; otherwise it gives back every node it took. Renewal extends the
// lock on every node that still holds the grant and needs a quorum.
// Release deletes it where the grant still holds it and publishes a wake-up
// on each node; waiters listen on every node and try again when one
// arrives, or when the lock's remaining TTL runs out. After a first,
// parallel attempt, a waiter asks the first reachable node alone before
// the others: competing waiters then cannot split the nodes among
// themselves, the losers learn "held" from one node and wait again.
//
// Use a Redis client per node with DialerRetries: 1: go-redis retries a
// failed dial five times, 100ms apart, and every call to a dead node would
// then wait out the node timeout.
//
// # The token, and why it is monotonic
//
// Kleppmann's critique of Redlock holds for the lock: a node that restarts
// without persistence, a process pause or clock jumps can let two clients
// believe they hold it at once. Fencing tokens make that harmless — if the
// tokens of successive grants grow. Redlock has no single counter to draw
// them from, so this package builds one from the quorum:
//
//  1. Each node's acquire script, on granting its lock, returns the node's
//     counter floored by its clock: max(counter, server time in µs).
//  2. With a quorum of nodes granted, the token is the largest of their
//     counters plus one.
//  3. The token is written back to every node won — counter = max(counter,
//     token) — by a script that writes only while the node's lock still
//     holds this grant's id.
//  4. The token is handed out only once a majority acknowledged the
//     write-back; otherwise the attempt gives the nodes back and fails.
//
// The argument. Let grant A hand out token a, and let grant B acquire after
// A's write-back. A's write-back reached a majority W; B won a majority R;
// W and R share a node n. B's SET NX on n succeeded, so n's lock was free,
// so A's hold on n had ended — after A's write-back there, which ran only
// while A held n. Hence n's counter was at least a when B read it, and B's
// token is at least a + 1. Two grants that both succeed are ordered this
// way too: each needed a majority of write-backs while holding the node,
// their majorities share a node, one hold there ended before the other
// began, so the later grant read the earlier one's token. Tokens therefore
// strictly increase from grant to grant and are never handed out twice.
//
// What it still assumes. The shared node n must not have lost its counter
// between A's write-back and B's read — a restart without persistence, a
// FLUSHALL, the counter expiring after CounterIdle. Any two majorities of
// five nodes share at least one node, so with N = 5 the argument holds as
// long as, for every such pair, one shared node kept its counter: at most
// N/2 nodes may lose counters, and not the whole intersection. Beyond that
// the clock floor takes over: a node that lost its counter reports its
// clock in microseconds, which is above every earlier token as long as its
// clock reads later than the clocks of the nodes that minted them did.
// Only a lost intersection together with a clock behind (a stepped clock,
// or skew larger than the time between the two grants) can make a token go
// back. The resource then refuses the lower token — safety holds, the
// holder is refused — and [Locker.Heal] moves the counters past the
// resource's high-water.
//
// The price of the token is one extra round: the write-back, in parallel
// to the nodes won. An uncontended acquire is two parallel rounds, a
// release one.
package redlock

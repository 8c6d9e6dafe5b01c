// Package redlock runs the Redlock algorithm over N independent Redis
// nodes — and hands out fencing tokens that grow with every grant, which
// Redlock alone cannot do.
//
// A [Locker] is safe for concurrent use; Close it when done (it holds one
// pub/sub connection per node for waiters). A [Sequencer], the resource
// side's view of the same locks, holds nothing and needs no Close. The
// nodes must run Redis 6.0 or later (SET … KEEPTTL).
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
// Use a Redis client per node; with go-redis v9.16 or later set
// DialerRetries: 1 on it: those versions retry a failed dial five times,
// 100ms apart, and every call to a dead node would then wait out the node
// timeout.
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
//     counter floored by its clock: max(counter, server time in µs + d),
//     d the node's clock offset for the key (0 until a heal or a
//     write-back sets it; see "The clock offset" below).
//  2. With a quorum of nodes granted, the token is the largest of their
//     counters plus one.
//  3. The token is written back to every node won — counter = max(counter,
//     token), d = max(d, token − 1 − the node's clock at step 1), and the
//     lock's value becomes "id|token" — by a script that writes only while
//     the node's lock still holds this grant's id.
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
// # The clock offset
//
// A heal puts the counters above every node's clock. Were tokens then the
// largest counter + 1, they would not grow with time, and until the
// clocks passed the healed value a node in the intersection that loses
// its counter (a restart without persistence) would make the next token
// not go back but repeat: grant A writes back a = c + 1 to nodes 0–2 (3
// and 4 cut off), node 2 restarts, B wins 2–4 while A still holds 0 and 1,
// reads c on 3 and 4, and gets a again — two holders with equal tokens,
// and every fence admits an equal token as the same holder. So each node
// keeps, with its counter and in the same key ("c:d" at <prefix>{key}:tok,
// so that an eviction or an expiry never takes one without the other), an
// offset d, and floors its counter by clock + d: [Locker.Heal] raises d
// to the target's lead over the node's clock, and every write-back to the
// token's lead (token − 1 − the node's clock at the write-back). Healed
// tokens then
// grow with the clocks like unhealed ones: in the example, nodes 3 and 4
// floor c by their clock + the heal's lead, which has grown since A's
// grant, and B's token is above a (integration/review19
// TestDefectRedlockHealedCounterRepeatsTokenAfterNodeRestart; its control,
// the offsets deleted, repeats the token). A node that restarts loses its
// offset with its counter and falls back to its bare clock, as before: the
// argument above, with "clock" read as "clock + offset" on the nodes that
// kept theirs.
//
// The write-back's offset also carries a fast clock's lead to the nodes
// written: after a grant whose token came from a node whose clock runs
// ahead, the others floor at least as high, so a later lost intersection
// does not depend on that node's clock. Offsets only grow; a token drawn
// from a node's own floor leaves its offset as it was (the −1), so d does
// not creep from grant to grant. Counter and offset live and idle out
// together (CounterIdle).
//
// Keys healed by a version before the offset hold a bare counter above
// the clock, read as offset 0: the repeat stays possible for them
// (integration/review19c TestDefectLegacyHealedCounterRepeatsToken) until
// they are healed again, which writes the offset — heal such keys after
// upgrading every client (older versions read "c:d" as a malformed
// counter and fail closed).
//
// The price: a lead, once carried, stays. A node whose clock jumped X
// ahead and was set right again leaves the key's tokens X ahead of the
// clocks for as long as its counters live (they idle out after
// CounterIdle without grants), where before they stayed flat (counter + 1)
// until the clocks caught up. Both fail closed: a resource refuses
// nothing honest for it unless X exceeds its [token.ClockBound] skew (5
// minutes by default), and then it refuses, never admits. To recover from
// such a jump, prefer [token.SequencerCheck] at the resources; or, with the
// key not held, delete its <prefix>{key}:tok on every node and
// [Locker.Heal] it to the resources' marks.
//
// The price of the token is one extra round: the write-back, in parallel
// to the nodes won (storing the token with the lock costs no round: it is
// one more SET in the same script). An uncontended acquire is two
// parallel rounds, a release one.
//
// # Exact over the whole range, and the ceiling
//
// Tokens are exact from 1 to [token.MaxInt64] (2^63−1), the ceiling: no
// path passes through floating point, though Redis's Lua numbers are
// doubles, exact only below 2^53. The scripts keep counters as canonical
// decimal strings, compare them as strings (longer is larger; of equal
// length, in two exact halves), read the clock as a string (seconds and
// zero-padded microseconds), and return counter, clock and offset as
// strings; the floor (clock + offset, and the max with the counter) and
// the +1 of step 2 happen in Go, in uint64. The acquire's floor, the
// write-back's "raise only if greater", [Locker.Heal] and [Locker.Issued]
// all work this way. A stored counter or offset that is not such a string
// (someone else wrote the key) fails its node with a [*CounterError]
// before anything is taken there; Heal replaces it.
//
// At the ceiling: an acquire whose quorum's largest floor is already
// token.MaxInt64 (a clock + offset past it counts as at it) fails with an error wrapping a [*token.RangeError] (and
// gives back the nodes it took) rather than mint past it or repeat it;
// Heal refuses targets above token.MaxInt64 − 1 (and zero)
// with an error wrapping [locks.ErrInvalidArgument] and, above it, a
// *token.RangeError, touching no node. Every token fits PostgreSQL's
// bigint. Counters are server microseconds (about 2^50.7 in 2026) unless
// healed: the ceiling is reached only by healing to near it. A key healed
// to v has tokens for about (token.MaxInt64 − v) µs of clock (the heal's
// offset grows the floor with the clock): healed to MaxInt64 − 1, the next
// grant is already past the ceiling.
//
// # Which token is current: the Sequencer
//
// [Sequencer.Current] answers, for [token.SequencerCheck], the token of
// the lock's current grant: the holder's token when one grant's
// "id|token" is the lock's value on a majority of the nodes; otherwise a
// bound computed from the counters — the quorum-th largest of the nodes'
// counters (adjusted for nodes that did not answer or have none), which is
// at least the last grant's token (its write-back reached a majority) and,
// with every node answering, at most the next holder's (the next holder's
// majority shares a node with the quorum at the top). Not the largest
// counter: a failed attempt's write-back may have reached a minority, and
// failed attempts can stack tokens there above what the next holder mints
// from the other nodes. Current's doc has the full argument: never below a
// live holder's token, never above the current holder's when one holds a
// majority, never decreasing.
//
// Cost: one parallel round trip to every node (each bounded by a second),
// answers from a majority needed, else a [*QuorumError]. SequencerCheck
// caches answers, so a resource pays it about once per grant it sees.
//
// Where it is weaker: with nodes unreachable, or without a counter (a
// restart without persistence, CounterIdle passed), Current still bounds
// every live holder but may stand above the next holder's token — only
// when failed attempts left tokens above what the next holder reads, which
// the clock floor prevents unless those tokens came from a node whose
// clock (or offset) runs ahead of the others' — and a later answer may
// then be lower. When a majority of nodes lost lock
// and counter together, the grant is lost and Current may answer below its
// token (the resource refuses that holder: it fails closed). And it
// inherits the tokens' failure mode: a node in the intersection losing its
// counter while its clock stepped back can give the next grant a token
// below the last one; Current then answers that lower token for the new
// holder, which the resource refuses as stale until [Locker.Heal].
//
// # Forged tokens
//
// Threat model: a client of the resource that does not hold the lock can
// present any token; one far above the holders' would become the
// resource's mark and lock every honest holder out.
//
//   - [token.ClockBound], every enforcer's default, bounds redlock's
//     clock-floored tokens by the resource's own clock plus a skew, with no
//     round trip: a forger can lock a resource out for at most that skew.
//     It assumes counters were not healed above the clock: after a Heal to
//     a resource's high-water far above the clock, honest tokens are above
//     the bound and refused — use the sequencer check there.
//   - [token.SequencerCheck] over a [Sequencer] bounds tokens by the
//     current holder's: a forger can at worst act as the current holder
//     until the next grant, never raise a mark above it. Put it after a
//     ClockBound with [token.All] so made-up tokens cost no round trip.
//
// Neither authenticates: a forger who presents the current holder's exact
// token is let in like the holder. Keep fenced routes to clients that
// take the lock. [Locker.Issued] is a weaker bound (the largest counter or
// clock on a majority: every token ever issued, not the holder's).
//
// # Waiters: no hand-over, and why a frozen one cannot hold on
//
// A release does not hand the lock to a waiter: it deletes the lock and
// wakes everyone, and waiters try again from scratch, each attempt with a
// fresh grant id. So a wake-up is only a hint — a stale or duplicated one
// costs an attempt, nothing else — and every lease [Locker.Acquire]
// returns comes out of a complete attempt: SET NX on a quorum, the token
// minted from the counters those very scripts read, its write-back
// acknowledged by a quorum of nodes that still held this attempt's id, and
// validity left. A waiter frozen anywhere in its attempt (its write-back
// not yet sent, or its acquire replies not yet read) and resumed after its
// node locks expired and another client X acquired finds the nodes X's:
// its write-back is refused there (it may have minted a token below X's
// from counters read before X's — that token is never handed out), the
// attempt gives up, and it waits for X like any other waiter. Its
// validity, measured on the local monotonic clock from before its first
// request, has run out by then too. What no lock can prevent remains: a
// pause after the validity check, between the attempt and the caller — the
// lease then comes back with its [Lease.Deadline] already past (package
// guard gives such a lease back and tries again), and the resource's fence
// refuses the lower token once X has claimed.
//
// # Errors
//
//   - [locks.ErrNotObtained]: TryAcquire found the lock held.
//   - [locks.ErrNotHeld]: Renew or Release of a grant that lost its quorum.
//   - [locks.ErrInvalidArgument]: a bad argument (empty key, short TTL, a Heal
//     target of zero or above it); nothing was sent.
//   - [*QuorumError]: too few nodes answered; no token was issued.
//   - [*CounterError] (token.ErrInvalid): a node's counter or offset is
//     malformed (inside a QuorumError when it cost the quorum); retrying
//     does not help, [Locker.Heal] replaces it.
//   - [*token.RangeError] (token.ErrRange): the counter is at the ceiling.
//   - [locks.ErrClosed]: the Locker was closed while an Acquire waited.
//
// # Deadlines
//
// Every call returns by its context's deadline with the nodes unreachable;
// each node's call is bounded by Options.NodeTimeout as well. An attempt
// that took some nodes but not a quorum gives them back on a context of its
// own, bounded by a second, waiting for that a moment (50ms) past its
// deadline and leaving the rest to the background; [Locker.Close] waits for
// it. As with redislock, go-redis bounds reads by ReadTimeout rather than
// the context unless the client has ContextTimeoutEnabled.
//
// A call that its context's deadline cut short fails with an error that
// matches context.DeadlineExceeded (errors.Is), inside the
// [*QuorumError] when there is one — also when go-redis reported the cut
// as the socket's i/o timeout, which it does when the socket's deadline
// (the context's) fires before the context's own timer. A node's own
// timeout (NodeTimeout) before the caller's deadline is not the caller's
// deadline, and does not match.
package redlock

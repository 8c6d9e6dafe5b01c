// Package zklock is a [locks.Locker] on ZooKeeper (through
// github.com/go-zookeeper/zk), whose fencing token is the Czxid of the
// grant's znode.
//
// go-zookeeper's own zk.Lock takes no context, reports no loss of its
// session and exposes no token; this package builds the lock recipe itself.
//
// # Queue
//
// Each key is one znode under Options.Prefix, its name the key
// path-escaped, so any string is a key ('/' included). An acquire creates
// an ephemeral sequential child and holds the lock when its child is the
// first in sequence order; until then it watches only the child just before
// its own, so a release wakes one waiter, not the herd, and waiters are
// served in the order they queued — across connections and processes.
//
// The create runs in one transaction with a write of the key's znode's
// data. The reply to that write carries the transaction's zxid, which is
// the new child's Czxid, and the key's number of children; so an
// uncontended acquire takes one round trip and its release one more, where
// zk.Lock takes three. A waiter whose predecessor held the lock takes it
// from the deletion event alone, with no further read (a sync when it
// waited longer than an eighth of its TTL); one whose
// predecessor was still waiting when it listed the queue lists it once
// more, a round trip, as zk.Lock does after every deletion (a sync and
// the listing after a longer wait). Queueing costs
// the create, one listing and the predecessor's watch, as zk.Lock's does.
//
// Every try has a random part in its znode's name. When the reply to a
// create is lost (the connection broke), the acquire looks for its znode by
// that name once the session is back, and either carries on with it or,
// when its context has ended, deletes it — whether the create was applied
// or not. A cancelled or failed acquire deletes its znode before it returns
// (waiting at most 50ms; then in the background), so it holds up nobody.
//
// Keys' znodes are containers: ZooKeeper removes one about a minute after
// its last child went. The sequence number ZooKeeper appends is a signed
// 32-bit counter of its parent, bumped by every create and delete of a
// child; it goes negative after 2³¹ of them. The queue compares sequence
// numbers across that wrap (serial number arithmetic), which holds as long
// as one queue's live znodes span fewer than 2³¹ changes — always, in
// practice. The tokens never depend on it.
//
// # Tokens
//
// A grant's token is its znode's Czxid: the zxid of the transaction that
// created it. Zxids are one counter for the whole ensemble, ordered across
// leader elections (the epoch is the high 32 bits), so each grant's token
// is larger than every earlier grant's, of this lock and any other. It is
// not the sequence number, which wraps and restarts when the key's znode is
// re-created. Only restoring an old snapshot makes zxids go back.
//
// Zxids are positive 64-bit signed numbers, so tokens stay below 2⁶³
// ([token.MaxInt64]); nothing converts them through floating point. The
// [Fence] stores marks as decimal text and compares them as uint64: exact
// over the whole range of [token.Token], 2⁶⁴−1 included.
//
// [Locker.Issued] bounds the tokens issued for a key (the key's znode's
// Pzxid, after a sync) — waiters' included, so it is no bound for a
// resource to check against: use the [Sequencer] (below).
//
// # Hand-over
//
// A waiter takes the lock from its predecessor's deletion event alone, with
// no read, only while that proves the grant: the event is for the znode
// just before its own, which was the first when listed (nothing can queue
// ahead since: sequence numbers grow); its own znode was created by the
// session now up (checked against the session id), in the same unbroken
// connection (epoch) the event came in; and that session answered a
// request that went through the leader (a write, or a sync and the reads
// after it: see "Ensembles") sent at most TTL/8 ago. ZooKeeper counts a session's timeout
// (at least the TTL) from the last packet it received, so the session —
// and with it the waiter's znode — is alive until at least that send time
// plus the TTL, which becomes the lease's deadline. A waiter that fails
// the last test (it waited longer) sends a sync, and takes the lock when
// the sync is answered in the same epoch, dated from the sync's send time:
// the event proves the turn, the sync the session. A waiter that was
// frozen (a pause, SIGSTOP, a stalled connection) while the event waited
// for it gets no answer to that sync, however long its session seems up
// (the session is gone at the leader, which drops the connection): it
// lists the queue again, finds its session expired and queues anew,
// behind whoever took the lock meanwhile. Every other path grants on a reply
// that showed its znode first — the create's (the only child) or a
// listing's — in an unbroken connection. A listing made while the session
// passes that last test (the create just answered, or another request of
// the session) is the member's alone, a round trip, and proves the grant
// as the event does: a member's copy is a prefix of what the leader
// committed and has the waiter's create, so a znode ahead missing from it
// is deleted, and nothing queues ahead since; the lease is dated from the
// session's request, as on the event. Otherwise the listing follows a
// sync, so it is never a cut-off member's stale copy (see "Ensembles"),
// and the lease is dated from its send time.
//
// # Fence
//
// [Fence] keeps resources' high-water marks in znodes, for resources that
// live in ZooKeeper themselves. A session's reads are served by the member
// it is connected to, which may lag the leader, so no claim is accepted on
// a read: every acceptance — the equal token of the same holder's next
// access included — is a write the leader orders, conditional on the
// version read (a conditional set, a create, or a version check that
// writes no data), which fails on a stale read and makes the claim look
// again. That write is the claim's linearization point. A refusal rests
// on the read alone: marks only rise, so a mark read above the token was
// above it throughout. See [Fence] for why a sync before the read would
// not be enough, for [Fence.Reset], and for the cost.
//
// # Forged tokens
//
// A token is a number, not a credential: a client of a resource can
// present any. Zxids are far below the clock in µs, so the default check
// of every fenceguard enforcer ([token.DefaultCheck], a clock bound)
// bounds nothing here. Give the resource a [token.SequencerCheck] on a
// [Sequencer] (Chubby's CheckSequencer): it answers, after a sync, the
// Czxid of the key's first znode — the current holder's token — and the
// resource refuses anything above it.
//
// Threat model: the attacker is a client of the resource that can present
// any token for any resource, but cannot write to ZooKeeper (its ACLs keep
// it out of the lock and mark znodes). The sequencer check bounds what it
// presents by the current holder's token: it can at most act as the
// current holder until the next grant, never raise a mark above it, so
// the holder and every waiter queued behind it get through in turn. It
// does not authenticate: a client that learns or guesses the current
// token is let in like the holder. The check fails closed (a ZooKeeper
// error refuses the claim); a sync that misses the newest writes (see
// [Fence]) can only answer an older, lower token — the current holder may
// be refused for a moment, a higher token never admitted. A forger who can
// write to ZooKeeper can do anything and is out of scope. A mark poisoned
// anyway (say, before the check was deployed) is set back by
// [Fence.Reset], by name, with an audit record.
//
// # Sessions and TTLs
//
// An ephemeral znode lives as long as the session that created it, and a
// session's timeout is fixed when it is established; so the Locker opens one
// session per distinct TTL, asking for a timeout equal to the TTL, on
// demand, and shares it among all grants of that TTL (at most
// Options.MaxSessions sessions, 8 by default: use a few TTLs, not one per
// call). The server clamps the timeout to [minSessionTimeout,
// maxSessionTimeout], by default 2 and 20 ticks (4s and 40s):
//
//   - a TTL above the maximum fails with [locks.ErrInvalidArgument]: the session
//     could expire, and another client be granted the lock, before the
//     lease's deadline;
//   - a TTL below the minimum is granted, with a longer session: the lease
//     still ends at its TTL when not renewed, but a holder that crashes or
//     is cut off keeps the lock until the server expires its session, after
//     the minimum.
//
// go-zookeeper pings in the background, so a session outlives its holders'
// renewals. A lease therefore has a deadline of its own, the send time of
// the request that last showed it held plus the TTL: unless [Lease.Renew]
// moves it, the Locker deletes the znode then, and the lease is lost. So the
// lock is held for as long as its holder renews, as the TTL promises, and a
// stuck critical section is cut short. The server's session timeout (at
// least the TTL, counted from the last packet it received) covers the cases
// the client cannot act in: a crash, a pause, a partition.
//
// # Deadlines
//
// go-zookeeper's calls take no context, so each acquire runs in one
// goroutine of its own and returns when its context ends: Acquire,
// TryAcquire, Renew and Release return by their deadline with the ensemble
// unreachable. A znode the gave-up acquire queued is deleted in the
// background, waited for 50ms; [Locker.Close] waits for it. A lease whose
// connection broke is lost at once, so its Renew and Release answer
// [locks.ErrNotHeld] without a round trip.
//
// # Losing the session
//
// When the connection breaks the client cannot know whether the session
// will survive: it may expire, and the lock be granted to another, before
// the connection comes back. Every lease of the session is therefore lost
// at once (ZooKeeper's and Curator's advice for a suspended connection):
// [Lease.Lost] is closed (so package guard cancels the lease context at
// once), and Renew fails with [locks.ErrNotHeld]
// without a request. An expired session loses its leases too. When the session
// survives, the lost lease's znode is still there: Release deletes it, or
// the deadline does. Waiting acquires ride out a broken connection; they
// start over when their session expired.
//
// # Ensembles
//
// Give [New] every member of the ensemble: go-zookeeper connects to one
// and, when that connection breaks, moves the session to another, keeping
// its id and its ephemeral znodes as long as it reconnects within the
// session timeout. A member lost to a crash or a partition therefore ends
// the leases of the sessions on it at the break (Lost closed, Renew
// [locks.ErrNotHeld]), whether the session then moves or expires; a
// killed leader ends every session's leases, since the followers drop
// their clients while they elect. The grants' znodes outlive a session
// that moved until Release or the lease's deadline deletes them, so the
// next waiter is granted only after that, or after the session expired;
// waiters ride out the move, or queue anew when their session expired.
// Tokens keep growing across elections: a new epoch's zxids are above the
// old one's. The tests run the conformance suite on a three-member
// ensemble, kill the leader under a held lock with waiters queued, cut
// a holder off its member, and cut its member off the leader.
//
// A member cut off from the leader while its clients stay connected goes
// on answering them — pings and reads, from its frozen copy — until it
// notices the leader gone (syncLimit ticks), seconds after the leader
// expired their sessions and granted their locks to others. So nothing
// that grants or renews rests on a read the member answers alone: a grant
// comes from the create (a write: the leader checks the session and orders
// it), from a listing made after a sync (which the member passes to the
// leader, and answers only after applying everything the leader committed
// before it, a session's closing included), or from a deletion event or a
// listing the member answered alone, dated from a write or sync of the
// session sent at most TTL/8 before (see "Hand-over"), and [Lease.Renew]
// syncs before its Exists. (A sync is no quorum operation: a leader cut off from the
// others answers it alone. But that leader steps down, dropping its
// clients, after syncLimit ticks without a quorum; the others start
// electing only after syncLimit ticks too, and their new leader expires
// the session a session timeout after taking over.) On a cut-off member
// the sync waits, and the member answers
// nothing more of that session meanwhile (ZooKeeper keeps a session's
// requests in order, its pings included), so go-zookeeper drops the
// connection two thirds of the session timeout after the member's last
// answer and every lease of the session is lost (Lost closed, Renew
// [locks.ErrNotHeld]). Measured with a 1.5s TTL: lost 0.9–1.15s after the
// break, the leader's grant to the next waiter 1.3–1.6s after it; with
// Renew an Exists alone, the stale holder renewed for 3–5s past that grant.
// The sync costs Renew a round trip to the leader: its median went from
// ~0.3ms to ~0.6ms on the leader and ~0.7ms on a follower (loopback,
// three members).
//
// What is left: the leader counts a session's timeout not from the
// renewal but from its member's last report of the session's traffic,
// sent with the member's answers to the leader's pings (every half tick).
// A member cut off just after a renewal can thus leave the leader's
// expiry earlier than that renewal's Deadline, by up to half a tick plus
// the gap between the session's packets before the renewal, less what the
// session timeout exceeds the TTL by. The loss report above, or the
// deadline's own lapse, came first in every test run; with the TTL below
// the session timeout by that margin (TTLs under the server's minimum
// session timeout, say) the Deadline holds strictly.
//
// A session reads from its member, which may lag the leader: the watch a
// waiter sets may be on a stale copy, which only delays a grant (a
// predecessor still there), never makes one: a member that applied the waiter's own create
// applied every earlier create, so a znode ahead of the waiter is missing
// from its listing only once deleted. The [Fence] decides
// every acceptance by a write the leader orders, so a lagging member's
// read cannot let a stale holder in; the [Sequencer] syncs before it
// reads.
//
// # Errors
//
// Besides the errors of package locks ([locks.ErrClosed] after [Locker.Close]):
// TryAcquire and Issued fail when no session came up within
// Options.SessionWait (Acquire waits as long as its context allows);
// connection and server errors come back wrapped, and mean the state of the
// lock is unknown. The [locks.ErrNotHeld] of a lease says why it was lost.
//
// [Sequencer.Current] fails with [locks.ErrInvalidArgument] for the empty key.
// [Fence] returns the errors of package token ([token.StaleError],
// [token.ForgedError] from its check, [token.ErrMissing],
// [token.ErrNoResource]).
//
// A Locker owns its sessions and their goroutines: Close it, which ends its
// leases too. A Fence and a Sequencer use a connection the caller owns and
// hold nothing to close. All are safe for concurrent use.
package zklock

// Package zklock is a [locks.Locker] on ZooKeeper (through
// github.com/go-zookeeper/zk), with the [Sequencer] that tells a resource
// the token of a lock's current grant and a [Fence] that keeps resources'
// marks in znodes.
//
//	locker, err := zklock.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		zklock.Options{Prefix: "/myapp/locks"})
//	...
//	defer locker.Close() // ends the sessions, and with them every lease
//	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
//
// go-zookeeper's own zk.Lock takes no context, reports no loss of its
// session and has no token; this package builds the lock recipe itself.
// Any string is a key: each is one znode under Options.Prefix, its name
// the key path-escaped; waiters queue as its ephemeral sequential children
// and are served in order, each woken by its predecessor's deletion.
//
// # Tokens
//
// A grant's token is its znode's Czxid, the zxid of the transaction that
// created it. Zxids are one counter for the whole ensemble, ordered across
// leader elections, so every grant's token is larger than every earlier
// grant's, of this lock and of any other. Only restoring an old snapshot
// makes them go back. They stay below 2⁶³ ([token.MaxInt64]). Tokens are
// far below the clock in µs, so a resource's default clock bound
// ([token.ClockBound]) refuses no forged token here: give it
// [token.SequencerCheck] on [NewSequencer] (with the Locker's Prefix), which
// refuses every token above the current holder's. [Locker.Issued] bounds
// what was issued, queued waiters included; it is no bound for a resource.
//
// # Sessions and TTLs
//
// A grant lives as long as the session that created its znode, and a
// session's timeout is fixed when it is established. The Locker opens one
// session per distinct TTL, with a timeout equal to the TTL, and shares it
// among the grants of that TTL: use a few TTLs (at most
// Options.MaxSessions, 8 by default). The server clamps session timeouts
// to its [minSessionTimeout, maxSessionTimeout], by default 4s and 40s:
//
//   - a TTL above the maximum fails with [locks.ErrInvalidArgument];
//   - a TTL below the minimum is granted, but a holder that crashes or is
//     cut off keeps the lock until the server expires its session, after
//     the minimum.
//
// Each lease also has a deadline of its own, the TTL from the request that
// last showed it held: unless [Lease.Renew] (package guard calls it every
// TTL/3) moves it, the Locker deletes the znode then. Renew and Release act
// only on this grant's znode, so a late call never touches a newer grant.
//
// # Lock-delay
//
// With [Options].LockDelay a lease that ends without a Release — not
// renewed by its deadline, or lost with its connection — keeps its znode,
// and so the lock, until the delay past its Deadline, and each session
// asks for a timeout of TTL + LockDelay, so that a holder that crashed or
// froze keeps its znodes as long; the lease's TTL and Deadline count the
// TTL alone. A Release deletes the znode at once, and so does
// [Locker.Close], which ends the sessions: close the Locker only once the
// critical sections it holds locks for have ended. TTL + LockDelay must fit
// the server's maximum session timeout, or the acquire fails with
// [locks.ErrInvalidArgument]. The longer session timeout makes
// go-zookeeper notice a dead connection later (two thirds of it); the
// lease's deadline does not move. What the delay buys and what it does
// not: package locks, "Lock-delay".
//
// # Loss
//
// When the connection breaks the client cannot know whether the session
// will survive, so every lease of that session is lost at once: [Lease.Lost]
// is closed (package guard then cancels the lease context) and Renew fails
// with [locks.ErrNotHeld] without a request. An expired session, or
// [Locker.Close], ends its leases too. Give [New] every member of the
// ensemble: a session moves to another member when its connection breaks,
// but its leases are lost all the same, and a killed leader ends every
// session's leases. Waiting acquires ride out a broken connection and queue
// anew when their session expired. Renew goes through the leader (a sync),
// so a member cut off from the leader cannot renew a lease the leader may
// have expired; the session's leases are then lost within about two thirds
// of the session timeout. One margin remains: the leader may expire a
// follower's session up to about half a server tick before a renewal's
// Deadline (see docs/design.md).
//
// # Fence
//
// [Fence] decides every acceptance by a write the leader orders, never by
// a read a lagging member could serve. [Fence.Reset] sets one mark back by
// name and logs it.
//
// # Deadlines, errors, concurrency
//
// Every call returns by its context's deadline, also with the ensemble
// unreachable; a failed acquire's clean-up may finish in the background.
// Besides the errors of package locks ([locks.ErrClosed] after
// [Locker.Close]), TryAcquire and Issued fail when no session came up within
// Options.SessionWait (Acquire waits as long as its context allows), and
// errors from ZooKeeper come back wrapped and leave the lock's state
// unknown. [Fence] and [Sequencer] return the errors of package token.
//
// A Locker owns its sessions and their goroutines: Close it, which ends its
// leases. A Fence and a Sequencer use a connection you own and hold nothing
// to close. All are safe for concurrent use. The reasoning behind all this
// is in docs/design.md, "How each backend holds a lock".
package zklock

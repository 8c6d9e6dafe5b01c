// Package faults is fenceguard's fault-injection suite: real faults against
// real servers, in the spirit of Jepsen's lock tests, checked by checkers
// that can fail — and shown to, on every run, by a control with fencing off.
// It is all tests; this file only documents it. docs/reliability.md keeps the
// latest summary.
//
//	FENCEGUARD_REQUIRE_SERVERS=1 go test -race -run TestFaults -v ./integration/faults
//
// # Cells and runs
//
// A cell is one locker (memlock, redis, redis-cluster, redis-sentinel,
// redlock, etcd, zk, zk-ensemble) under one nemesis (below); the matrix
// holds every pair that applies (29 cells). A cell runs 6 times by
// default, 3 times each variant of the forced schedule (the redis-sentinel
// and zk-ensemble cells 3 times): each control shows the lost update in
// every run by construction, so more runs sample more of the faults'
// timing without making the controls any surer. A long run gives
// -faults.runs (every cell, the slow ones included, then runs that many
// times) or -faults.soak, and a -timeout to match:
//
//	FENCEGUARD_REQUIRE_SERVERS=1 go test -race -timeout 60m -run TestFaults -v ./integration/faults -faults.runs=20
//
// Every run exercises every enforcer at once, each on its own copy of the
// run's two items:
//
//   - pg-column: storage/postgres column mode, the claim in the statement
//     that reads or writes;
//   - pg-tx: storage/postgres Tx, the claim in fence_tokens, then plain SQL
//     in the same transaction;
//   - mysql-column: storage/mysql column mode on MariaDB (one server for
//     the test process, a database per cell; FENCEGUARD_MYSQL_DSN, when
//     set, must name a MariaDB server: the copies' log is its system
//     versioning), Table.Read's claim, then Table.Update in the statement
//     that writes;
//   - mysql-tx: storage/mysql Tokens.Tx, the claim in the high-water table,
//     then plain SELECT and UPDATE in the same transaction;
//   - http+pg: httpmw with the PostgreSQL Fence in front of a handler in
//     column mode (the demo's setup, strong across processes);
//   - http+mem, http+redis, http+etcd, http+zk: httpmw with
//     token.MemoryFence, redislock.Fence, etcdlock.Fence or zklock.Fence and
//     SerializePerKey, in front of items in the service's memory (strong
//     within the one service process);
//   - grpc+pg: grpcmw's interceptors (grpcmw.Client on the clients, the
//     server's Interceptor with grpcmw.ClaimInStore) in front of a gRPC
//     service on a loopback port whose handler reads and writes in column
//     mode with the token of its context, answering the store's refusals
//     with grpcmw.Error (the setup the README shows; messages are
//     structpb.Struct, the service described by hand).
//
// Each enforcer's copy has a twin with fencing off, the control: the same
// path without the claim (plain SELECT and UPDATE, a transaction without
// Tx, the handler without the middleware or, for gRPC, a service the
// interceptor does not fence), reached by the same clients under the same
// lock in the same critical sections. So every control sees exactly the
// schedule and the fault its fenced copy sees.
//
// An item has a stock (the inventory workload: a sale reads the stock and
// writes it less one) and a value (the register workload: a critical section
// reads it and writes a new, unique one, or only reads it). A client's
// critical section locks the item, reads it in every copy, then writes every
// copy it read.
//
// # Clients and the forced schedule
//
// Three clients: c1, the victim of every fault; c2, which takes its lock
// over; c3, which works on the run's other item meanwhile. Each is a separate
// process — the test binary, started again with its configuration in
// FENCEGUARD_FAULTS_CLIENT, so TestMain runs it as a client — with its own
// guard, locker and connections; only memlock's clients are goroutines of
// the test process, since memlock is in-process. Clients report every access
// (history.Access) and wait, where the schedule says so, for the
// orchestrator's acknowledgement.
//
// A run: c2 and c3 sell a unit each; c1 locks the forced item, reads it in
// every copy, and waits; the nemesis makes c1 lose its lock without it
// noticing in time; c2 is granted the lock (the run fails if it never is,
// or gets a token not above c1's); then, alternating from run to run:
//
//   - late write (even runs): c2 reads and writes; c1 writes what it computed
//     before the fault — Kleppmann's paused client;
//   - write between (odd runs): c2 reads; c1 writes; c2 writes. Fencing that
//     checked only writes would accept c1's write here; only the claim on
//     c2's read refuses it.
//
// c1 sends its write whatever its guard believes: a holder can be paused
// after its last look at the lease context, so only the resource's check can
// stop it, and the suite does not count on where a pause lands. Then the
// fault is healed and all three clients run two more rounds of critical
// sections of random kinds on both items. Every control therefore shows a
// lost update in every run — certain, not likely — and the run fails if one
// does not: a schedule that does not bite proves nothing. The one exception
// is a control whose forced writes did not both complete (an access timed
// out or failed): it cannot show the lost update, so the run is counted as
// inconclusive for that enforcer, logged with both writes, and shown in the
// summary's note; more than a tenth of a cell's runs inconclusive fails the
// cell.
//
// # Nemeses
//
//   - pause: c1's process is frozen with SIGSTOP (the orchestrator waits
//     until the kernel shows it stopped), past its lease, until c2 has taken
//     the lock; then SIGCONT.
//   - kill: the lock server dies. Redis: SIGKILL, restart without its data
//     (no persistence: locks and token counters lost). Redlock: c1 reaches
//     only nodes 1-3 when it locks (its connections to 4 and 5 cut), nodes 2
//     and 3 are killed and restarted empty, c2 takes nodes 2-5 — two holders
//     at once, Kleppmann's case against Redlock. etcd: the leader of a
//     three-member cluster, the only member c1 talks to, is killed; the
//     others elect a new leader, which lets c1's lease expire; the member is
//     restarted after. ZooKeeper: SIGKILL and restart with its data.
//   - partition: c1's connections to the lock service, through the
//     harness's in-process proxy, are cut, then restored.
//   - delay: the lock service's replies to c1 are held back 3 TTLs.
//   - clock: c1's guard clock stands still (a clock stepped back, again and
//     again): no renewal, no local deadline, c1 believes its lease is live
//     while the lock service counts real time. It runs again after c1's
//     write.
//
// Redis Cluster (locker redis-cluster: redislock through a go-redis
// ClusterClient on a cluster of three masters with a replica each, the
// cell's own) has three cells. kill: the master that holds the forced
// item's lock is killed while c1 holds it, the cluster promotes its replica
// (cluster-node-timeout 1 s and an election, 2-3 s), c2 takes the lock there;
// the old master is restarted and rejoins as a replica before c1 writes.
// pause: as above. partition: a ClusterClient connects to the node
// addresses CLUSTER SLOTS names, not to its seeds, so c1's dialer sends
// each node's address to that node's proxy (lockConfig.AddrMap), and
// cutting the proxies cuts c1 off from the whole cluster. delay and clock
// are left out: they exercise the client and the proxies, nothing the
// cluster does differently from the redis cells.
//
// Replicated lock services (nemesis_ensemble_test.go), 3 runs a cell
// unless -faults.runs is given: redis-sentinel is redislock through a
// go-redis Sentinel client (a primary, a replica, three sentinels) under
// kill — replication is stalled before c1 locks, the primary is killed,
// the sentinels promote the replica, which never saw c1's lock, so c2 is
// granted it while c1 still believes it holds it; the old primary is
// restarted, demoted and resynced — and pause; zk-ensemble is zklock on a
// three-member ensemble under kill (the leader: every member drops its
// clients while they elect), partition (c1 cut off from every member, so
// its session expires) and pause.
//
// # Checks
//
// Every copy of every item is checked after every run (package
// integration/internal/history): the stock never below zero and the units
// sold equal to the stock that left; the value's history linearizable
// (porcupine, critical sections as compare-and-sets); the tokens the copy
// accepted never decreasing, in the copy's own order — a trigger's sequence
// in PostgreSQL (accept_log), the row's versions in commit order in MariaDB
// (system versioning: a trigger on a table storage/mysql writes would hide
// its statements' outcome from it), a counter under the store's mutex in
// memory — not the clients' clocks — at each high-water mark on its own:
// http+pg has
// two, the middleware's and the column's, checked one after the other, so a
// request that passed the middleware may reach the row after a newer token
// passed the middleware too; the column then orders them (an early run of
// this suite flagged exactly that interleaving when the two were merged).
// grpc+pg has one, the column: its interceptor claims nothing.
// Besides: every fenced copy refused c1's stale
// write as stale, and accepted c2's (a copy that refused everything would be
// safe, and useless).
//
// # Output
//
// The summary table — per cell: runs, faults injected, and per enforcer the
// runs with a violation with fencing on and off — is logged at the end
// (go test -v) and, with -faults.doc, written into a Markdown file. A
// violation with fencing on fails the test and writes, for the item, its
// histories as JSON, a timeline picture (harness/timeline, as in the demo)
// of the fenced copy and its control, and porcupine's visualization when the
// value was not linearizable, under -faults.out, or the test's artifact
// directory with -artifacts, or a new $TMPDIR/fenceguard-faults-<time>.
//
// Flags: -faults.runs (per cell), -faults.soak (keep every cell running for
// a duration), -faults.cells (a regexp on "locker/nemesis"),
// -faults.parallel (cells at once), -faults.keep (artifacts of the first
// runs even without a violation, to look at), -faults.break (fence an
// enforcer's writes only, to watch the suite catch it), -faults.out,
// -faults.doc.
//
// # Attacks
//
// TestAttacks plays the nemeses the cells do not: the fence stores'
// replication (claims through a lagging ZooKeeper follower, a frozen etcd
// follower, a Redis replica and a failover that lost the master), tokens at
// the numeric edges (2^53 ± 2, 2^63 − 1, 2^64 − 1) through the lockers and
// every enforcer, a forger presenting tokens above the current grant and
// below the mark while honest holders run, a holder frozen inside a
// PostgreSQL Tx, a waiter frozen while it is handed the lock, and key types
// whose equal values print differently. Each attack runs its rounds on the
// fenced side and on a control — the same attack on the same servers
// against the code without the defence — and fails when the fenced side
// accepts a stale or forged write or refuses an honest one, or when the
// control never showed the violation. Its table goes into
// docs/reliability.md with -faults.doc, between markers of its own.
// Flags: -faults.attacks (a regexp on the attack's name), -faults.scale
// (multiplies every attack's rounds).
//
// # Transfer
//
// TestTransferFrozenHolder plays the transfer workload: two accounts, A
// and B, at 100 each, whose total is conserved, and transfers that read
// both balances and write the balances computed from that read, in a
// critical section over both locks (guard.DoAll; the lock keys are the
// resources, "acct:A" and "acct:B"). On each of redis, redlock, etcd and
// zk (the four at once), a holder process moving 10 from A to B is frozen
// with SIGSTOP between its read and its write, past its 2 s lease; the
// test is then granted both locks, moves 5 from B to A and must commit
// within 10 s, the holder still frozen (asking for the locks again, within
// the 10 s, when it loses its own lease before its transfer ended); then
// the holder is continued and writes.
// Fenced, the transfers run in storage/postgres TxAll: the server ended
// the frozen transaction at its lease's end, the holder's transfer is
// refused (ErrHoldExpired; a *token.StaleError would do too, and the log
// says which), and the balances are exactly the effect of the committed
// transfers. The control runs them in plain transactions: the frozen
// holder read without locking, so its write commits over the other's — a
// lost update, the total still 200 — and the test fails if the control
// does not show it, or if the frozen write did not complete (inconclusive).
package faults

// Package review19 holds the nineteenth review's adversarial tests of
// redislock on Redis Cluster and Sentinel and of zklock on a ZooKeeper
// ensemble, written against the public API and the harness only, by a
// reviewer who had not read the authors' tests. It is all tests.
//
// Tests named TestDefect* reproduce defects the review found and fail on
// the code they were written against. Those of defects not fixed yet skip
// unless -review19.defects is given (go test ./review19 -args
// -review19.defects); those of fixed ones run by default (each says so in
// its comment): TestDefectSentinelHealedCounterRepeatsTokenAcrossFailover
// and TestDefectClusterHealedCounterRepeatsTokenAcrossFailover (changed:
// each has a control, a key healed without the offset, whose token still
// repeats; TestHeldSentinelFailoverTokenGrows for Sentinel),
// TestDefectSentinelSequencerOnReplica, TestDefectClusterLockDuringMigration
// (changed: the calls made midway must succeed once the move is done) and
// TestDefectClusterNameStartingWithCloseBrace (changed: such names are
// refused with locks.ErrInvalid, as the doc now says).
//
//   - TestDefectSentinelHealedCounterRepeatsTokenAcrossFailover and
//     TestDefectClusterHealedCounterRepeatsTokenAcrossFailover: after
//     Locker.Heal (which puts the counter above the server clock, by
//     design), a failover that lost a grant minted the lost grant's token
//     again for the next holder; every fence accepts an equal token, so
//     both holders were admitted (the Fence with Replicas too). Fixed by
//     the heal offset (redislock: tokens max(counter + 1, clock + d), d
//     recorded by Heal).
//   - TestDefectRedlockHealedCounterRepeatsTokenAfterNodeRestart (found
//     while fixing the heal defect in redislock; fixed since, runs by
//     default): redlock had the same hole — after Heal its tokens were the
//     largest counter + 1, and a node restart without persistence in the
//     intersection of two majorities gave the next holder the token of a
//     live one. Fixed by a clock offset per node (Heal records the target's
//     lead over the node's clock, a write-back the token's); its control,
//     TestHeldRedlockHealWithoutOffsetRepeatsToken, deletes the offsets
//     after the heal and shows the token repeated and both holders
//     admitted, and TestHeldRedlockNodeRestartTokenGrows shows the clock
//     floor keeping the token growing without a heal.
//   - TestDefectSentinelSequencerOnReplica: a Sequencer on a replica
//     client answers the replica's lagging view (lock free: its clock), so
//     a forged token above the holder's passes SequencerCheck and locks the
//     holder out.
//   - TestDefectClusterLockDuringMigration: while a lock's slot migrates,
//     acquire and release fail with TRYAGAIN (their scripts name the queue
//     keys, which do not exist), against "resharding costs nothing but
//     round trips".
//   - TestDefectClusterNameStartingWithCloseBrace: a lock name starting
//     with '}' gives <prefix>{<name>} an empty hash tag, the lock's keys
//     span slots and every acquire fails with CROSSSLOT, against "Names may
//     contain braces".
//
// Tests named TestHeld* check claims that held, each with a control that
// shows what the defence prevents (see each test's comment).
//
// Fixed since, and run by default under a TestHeld* name:
//
//   - TestDefectZKLeaseOutlivesPartitionedMember, now
//     TestHeldZKLeaseEndsWithPartitionedMember: a zklock holder whose
//     member is cut off from the quorum kept renewing from the member's
//     stale copy (Renew was an Exists the member answers) for seconds after
//     the leader expired its session and granted the lock to another; its
//     guard lease stayed live and its Deadline lay past the other grant.
//     Renew now syncs through the leader before its Exists.
//
// The ZooKeeper partition (a member cut off from its peers, its clients
// not) is made with tc on the loopback device (an htb class shaped to
// 8 bit/s for the member's quorum and election ports); those tests skip
// when tc or root is missing, and remove the qdisc when they end.
package review19

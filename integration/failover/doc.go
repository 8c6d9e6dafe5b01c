// Package failover checks redislock across Redis Sentinel failovers that
// lose the last grant: the next grant's token is larger (the clock floor,
// the heal offset) and a fence refuses the first holder once the second
// wrote; a Sequencer on a lagging replica refuses rather than answering a
// stale token. A key healed without the offset is the control that shows
// the failover bites.
package failover

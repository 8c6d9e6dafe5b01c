// Package review19b holds the adversarial tests of review 19b against four
// fixes: redislock's heal offset, zklock's Renew through the leader,
// redislock's Sequencer refusing replicas, and redislock's retries on
// Cluster slot migrations and its lock-name checks. They use the public
// API and the harness only, against real servers. TestDefect* tests fail
// on the code they were written against; TestHeld* confirm a claim.
package review19b

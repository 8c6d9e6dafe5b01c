// Package rediscluster checks redislock on Redis Cluster: lock names and
// hash tags, calls made while a lock's slot migrates (they wait for the
// move; Renew and Deadline do not block behind a waiting Release), wake-ups
// from every master, kill-failovers of a master that lose a grant (tokens
// still grow, the Fence with Replicas keeps its mark), and Sequencers on
// replica-routing clients.
package rediscluster

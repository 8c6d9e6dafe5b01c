// Package etcdlease checks etcdlock's leases on a real etcd: pooled and
// background-refreshed leases (revoked, racing reuse, Close), releases that
// come late, cancelled acquires, FIFO order under contention, a server
// frozen while leases are pooled, and Lease.Lost: closed on deletion or
// expiry right after it is called, in every order with Release, and
// returning at once while etcd is frozen.
package etcdlease

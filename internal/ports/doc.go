// Package ports hands out free TCP ports on 127.0.0.1 for servers that must be
// told their port before they start (Redis, etcd, PostgreSQL, ZooKeeper).
//
// A port is free when this process can bind it. Between the check and the
// server's own bind another process may take it: callers start the server and,
// when it fails with "address already in use", pick again. Ports come from below
// the kernel's ephemeral range, so an outgoing connection of this machine never
// holds one (it would block restarting a stopped server on the same port), and a
// port is never handed out twice in one process, so a stopped server keeps its
// port for its restart.
//
// Pick is safe for concurrent use.
package ports

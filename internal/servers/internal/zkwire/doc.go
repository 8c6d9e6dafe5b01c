// Package zkwire is the test harness's own ZooKeeper client: a session over
// one TCP connection speaking ZooKeeper's jute protocol, with the few
// operations the harness needs to make and remove a test's chroot (create,
// delete, exists, get, children), plus the four-letter words (srvr, envi)
// it probes servers with. There is no client library in the harness's
// module graph.
//
// What it leaves out, on purpose: watches, reconnects, session moves,
// authentication, ACLs other than world:anyone, multi-ops. A Conn pings only
// when asked ([Conn.Ping]), so a session idle for longer than its timeout
// expires: it is for short exchanges, not for holding ephemeral nodes.
//
// Errors the server returns for an operation are [Error] values
// ([ErrNoNode], [ErrNodeExists], …), tested with errors.Is. A Conn is not
// safe for concurrent use; a call whose context ends, or that fails in
// transit, closes it.
package zkwire

// Package pgwire is the test harness's own PostgreSQL client: the frontend
// side of protocol 3.0, just enough to create and drop databases and to tell
// whether a server serves, without a driver in the harness's module graph.
//
// It logs in with trust, cleartext password, md5 or SCRAM-SHA-256 (without
// channel binding, and without SASLprep: a non-ASCII password that SASLprep
// would change fails), over TLS when the sslmode asks for it, and runs simple
// queries (several statements in one string are fine), returning every value
// as text. Kerberos, GSSAPI, SSPI, client certificates, the extended query
// protocol and COPY are not supported.
//
// A server's ErrorResponse is returned as an *[Error] carrying its SQLSTATE;
// callers test for it with errors.As. A Conn is not safe for concurrent use;
// a call whose context ends, or that fails in transit, closes it.
package pgwire

// Package resp is the test harness's own Redis client: one connection, one
// command at a time, RESP2 only (it never sends HELLO), no retries, no
// logging, no goroutines. It is what package servers needs to probe, clean
// and watch Redis servers without a client library in its module graph, and
// nothing more; tests of the locks use a real client.
//
// Replies map to Go values: a simple or bulk string is a string, an integer
// an int64, an array a []any, a null bulk or null array nil. An error reply
// is returned as an *[Error], which callers test with errors.As; transport
// failures are returned as they come from package net.
//
// A Conn is not safe for concurrent use. A call whose context ends, or that
// fails in transit, closes the Conn: its stream can no longer be trusted.
package resp

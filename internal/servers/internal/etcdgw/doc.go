// Package etcdgw is the test harness's own etcd client: a few calls of the
// v3 API through the JSON gateway every etcd server serves on its client URL
// (POST /v3/…, keys and values base64-encoded, 64-bit numbers as strings),
// so the harness needs no gRPC client in its module graph. etcd 3.4 (the
// Debian binary) and later serve it under /v3/.
//
// It knows what the harness needs and nothing more: health, status (who
// leads), the member list, put, range and delete of a key or a prefix. A
// call tries the endpoints in order and moves on when one cannot be reached;
// an answer with an error from etcd is returned as an *[Error].
//
// A Client is safe for concurrent use and needs no Close: it keeps no
// connection open between calls (no keep-alive), so it holds nothing and no
// goroutine of it outlives a call.
package etcdgw

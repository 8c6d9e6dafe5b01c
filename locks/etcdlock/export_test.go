package etcdlock

import "github.com/fenceguard/fenceguard/locks"

// WatchReady is closed once the watch behind l's Lost is in place and has
// found l's key: a test that then cuts the member off knows the watch, not
// its start, is what must notice.
func WatchReady(l locks.Lease) <-chan struct{} { return l.(*Lease).watchReady }

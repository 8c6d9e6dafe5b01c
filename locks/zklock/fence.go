package zklock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/token"
)

// FenceConn is what a [Fence] needs of a ZooKeeper connection; *zk.Conn
// satisfies it.
type FenceConn interface {
	Get(path string) ([]byte, *zk.Stat, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
}

// Fence is a [token.Fence] keeping each resource's high-water mark, in
// decimal, in the data of a persistent znode, for resources that live in
// ZooKeeper themselves. A claim reads the mark and its version and, when
// the token is higher, writes it conditionally on that version: a
// compare-and-set, repeated when another claim got in between. Marks are
// never deleted by the Fence: a deleted mark would let a stale holder in.
//
// go-zookeeper's calls take no context: when ctx ends first, Claim returns
// and the call in flight finishes in the background (its write, if any, is
// still a valid claim).
type Fence struct {
	c      FenceConn
	prefix string
	acl    []zk.ACL
}

var _ token.Fence = (*Fence)(nil)

// NewFence returns a Fence storing marks under prefix + "/" + the
// path-escaped resource (default prefix "/fenceguard/fence"; created when
// missing, with zk.WorldACL(zk.PermAll) like the marks).
func NewFence(c FenceConn, prefix string) *Fence {
	if prefix == "" {
		prefix = "/fenceguard/fence"
	}
	return &Fence{c: c, prefix: strings.TrimSuffix(prefix, "/"), acl: zk.WorldACL(zk.PermAll)}
}

func (f *Fence) path(resource string) string { return f.prefix + "/" + escape(resource) }

// Claim implements [token.Fence]: one read, and one conditional write when
// the mark moves.
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	if err := token.CheckClaim(resource, t); err != nil {
		return err
	}
	p := f.path(resource)
	for {
		cur, version, err := f.read(ctx, p)
		if err != nil {
			return fmt.Errorf("zklock: claim %q: %w", resource, err)
		}
		switch {
		case cur > t:
			return &token.StaleError{Resource: resource, Presented: t, Current: cur}
		case cur == t:
			return nil
		}
		data := []byte(t.String())
		if version < 0 {
			err = fenceCall(ctx, func() error { return f.create(p, data) })
		} else {
			err = fenceCall(ctx, func() error { _, err := f.c.Set(p, data, version); return err })
		}
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
			continue // another claim got in first: look again
		}
		if err != nil {
			return fmt.Errorf("zklock: claim %q: %w", resource, err)
		}
		return nil
	}
}

// HighWater returns the highest token resource has accepted, 0 if none.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	cur, _, err := f.read(ctx, f.path(resource))
	if err != nil {
		return 0, fmt.Errorf("zklock: high-water %q: %w", resource, err)
	}
	return cur, nil
}

// read returns the mark at p and its version; version -1 when there is none.
func (f *Fence) read(ctx context.Context, p string) (token.Token, int32, error) {
	var data []byte
	var st *zk.Stat
	err := fenceCall(ctx, func() (err error) { data, st, err = f.c.Get(p); return err })
	if errors.Is(err, zk.ErrNoNode) {
		return 0, -1, nil
	}
	if err != nil {
		return 0, 0, err
	}
	v, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("the mark %s holds %q: %w", p, data, err)
	}
	return token.Token(v), st.Version, nil
}

// create creates the mark, and the prefix when missing.
func (f *Fence) create(p string, data []byte) error {
	_, err := f.c.Create(p, data, zk.FlagPersistent, f.acl)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	cur := ""
	for _, part := range strings.Split(strings.TrimPrefix(f.prefix, "/"), "/") {
		cur += "/" + part
		if _, err := f.c.Create(cur, []byte{}, zk.FlagPersistent, f.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	_, err = f.c.Create(p, data, zk.FlagPersistent, f.acl)
	return err
}

// fenceCall runs fn, a blocking go-zookeeper call, and returns its error,
// or ctx's when ctx ends first: fn then finishes in the background, and the
// caller must not read what it writes.
func fenceCall(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

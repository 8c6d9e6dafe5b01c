package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// FenceConn is what a [Fence] needs of a ZooKeeper connection; *zk.Conn
// satisfies it.
type FenceConn interface {
	Get(path string) ([]byte, *zk.Stat, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Multi(ops ...any) ([]zk.MultiResponse, error)
}

// FenceOptions configure a [Fence]. Zero fields select defaults.
type FenceOptions struct {
	// Prefix is the znode under which the marks live, one child per
	// resource. It is created (with its parents) when missing. Default
	// "/fenceguard/fence".
	Prefix string

	// Check runs before every claim ([enforce.Admit]); a refusal moves
	// nothing. Nil is [token.DefaultCheck], a clock bound that ZooKeeper's
	// tokens (zxids, far below the clock in µs) always pass: to refuse
	// forged tokens, use a [token.SequencerCheck] on a [Sequencer].
	Check token.Check

	// Logger receives the audit record of every [Fence.Reset]. Default
	// slog.Default().
	Logger *slog.Logger

	// ACL is given to the znodes the Fence creates. Default
	// zk.WorldACL(zk.PermAll).
	ACL []zk.ACL
}

// Fence is a [token.Fence] keeping each resource's high-water mark, in
// decimal, in the data of a persistent znode, for resources that live in
// ZooKeeper themselves. It implements [token.Resetter].
//
// # Read consistency
//
// A claim reads the mark and its version with a plain read, which the
// member the session is connected to serves from its own copy: on a
// follower that has not yet applied the latest writes, the read is stale
// (and the leader, too, applies what it committed a moment later, so even
// a session on the leader may read a write acknowledged through a
// follower late). So no claim is accepted on the read alone, wherever the
// session is connected. The acceptance is decided by a write the leader
// orders, conditional on the version that was read:
//
//   - a higher token is written with a conditional set (setData with
//     that version);
//   - an equal token — the same holder's next access — is confirmed with a
//     version check (a multi of one check operation), which changes no
//     data but is ordered like a write;
//   - a mark that does not exist yet is created, which fails when it does.
//
// ZooKeeper orders every write, these included, in one sequence (Zab)
// through the leader, which checks the version against the latest state
// in that sequence — every write committed before, whether or not the
// follower has applied it. A condition that holds there holds at the
// write's place in the sequence, which lies between the claim's start
// and its reply: that is the claim's linearization point. A stale read
// makes the condition fail (ErrBadVersion, ErrNodeExists), and the claim
// reads again. A sync before the read would not do: ZooKeeper's sync is
// not a quorum operation — the leader answers it from its own queue and
// relies on timeouts, not a quorum round, to know it still leads (the
// ZooKeeper paper, §4.4) — so a deposed leader that does not know it yet
// can let a sync through that misses writes of its successor.
//
// A refusal rests on the read: marks only rise, so a mark read above the
// presented token was above it throughout the claim, however stale the
// read. [Fence.Reset] is the one exception: a session on a lagging member
// may refuse against the mark a Reset replaced until its member applied
// the reset (milliseconds; the session that reset sees it at once).
// [token.StaleError].Current is the mark read, a lower bound of the
// current one.
//
// Marks are never deleted by the Fence: a deleted mark would let a stale
// holder in (and restart the version, which the checks rely on). Reset
// sets one by hand, with a conditional write.
//
// [Fence.HighWater] is exact the same way: the mark it read is confirmed
// by a version check.
//
// Cost: an equal or higher claim is one read and one write through the
// leader (the check writes a log entry, no data); a refused one is the
// read; HighWater is a read and a check.
//
// go-zookeeper's calls take no context: when ctx ends first, Claim returns
// and the call in flight finishes in the background (its write, if any, is
// still a valid claim).
type Fence struct {
	c      FenceConn
	prefix string
	acl    []zk.ACL
	check  token.Check
	logger *slog.Logger
}

var (
	_ token.Fence    = (*Fence)(nil)
	_ token.Resetter = (*Fence)(nil)
)

// NewFence returns a Fence storing marks under o.Prefix + "/" + the
// path-escaped resource.
func NewFence(c FenceConn, o FenceOptions) *Fence {
	if o.Prefix == "" {
		o.Prefix = "/fenceguard/fence"
	}
	if o.ACL == nil {
		o.ACL = zk.WorldACL(zk.PermAll)
	}
	return &Fence{c: c, prefix: strings.TrimSuffix(o.Prefix, "/"), acl: o.ACL, check: o.Check, logger: o.Logger}
}

func (f *Fence) path(resource string) string { return f.prefix + "/" + escape(resource) }

// Claim implements [token.Fence]: the check, a read, and one conditional
// write through the leader unless the token is refused (see "Read
// consistency").
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return err
	}
	if err := enforce.Admit(ctx, f.check, resource, t); err != nil {
		return err
	}
	p := f.path(resource)
	for {
		cur, version, err := f.read(ctx, p)
		if err != nil {
			return fmt.Errorf("zklock: claim %q: %w", resource, err)
		}
		if cur > t {
			return &token.StaleError{Resource: resource, Presented: t, Current: cur}
		}
		data := []byte(t.String())
		switch {
		case version < 0:
			err = fenceCall(ctx, func() error { return f.create(p, data) })
		case cur == t:
			err = fenceCall(ctx, func() error { return checkVersion(f.c, p, version) })
		default:
			err = fenceCall(ctx, func() error { _, err := f.c.Set(p, data, version); return err })
		}
		if retryable(err) {
			continue // the read was stale, or another claim got in first: look again
		}
		if err != nil {
			return fmt.Errorf("zklock: claim %q: %w", resource, err)
		}
		return nil
	}
}

// retryable reports a conditional write that failed because the mark is
// not what was read.
func retryable(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)
}

// checkVersion asks the leader to confirm that p is still at version: a
// multi of one check operation, ordered among the writes.
func checkVersion(c FenceConn, p string, version int32) error {
	res, err := c.Multi(&zk.CheckVersionRequest{Path: p, Version: version})
	if len(res) == 1 && res[0].Error != nil {
		return res[0].Error
	}
	return err
}

// HighWater returns the highest token resource has accepted, 0 if none.
// The answer is exact at a point between the call and its return: the
// mark read is confirmed by a version check through the leader (an absent
// one by a check that finds no znode), as a claim's acceptance is; a
// stale read makes it read again. So it costs a read and a write.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	p := f.path(resource)
	for {
		cur, version, err := f.read(ctx, p)
		if err != nil {
			return 0, fmt.Errorf("zklock: high-water %q: %w", resource, err)
		}
		// Version -1 checks only that the znode exists.
		err = fenceCall(ctx, func() error { return checkVersion(f.c, p, version) })
		switch {
		case version < 0 && errors.Is(err, zk.ErrNoNode):
			return 0, nil
		case version < 0 && err == nil:
			continue // created since, through another member
		case retryable(err):
			continue
		case err != nil:
			return 0, fmt.Errorf("zklock: high-water %q: %w", resource, err)
		}
		return cur, nil
	}
}

// Reset implements [token.Resetter]: it sets resource's mark to to, lower
// or higher, with a write conditional on the version it read (so prev is
// exactly the mark it replaced: a claim in between makes it read again),
// and logs it with [enforce.LogReset]. When ctx ends while the write is out,
// Reset returns ctx's error and the write may still land: it is then
// logged when its reply comes.
func (f *Fence) Reset(ctx context.Context, resource string, to token.Token) (token.Token, error) {
	if err := enforce.CheckReset(resource, to); err != nil {
		return 0, err
	}
	p := f.path(resource)
	data := []byte(to.String())
	for {
		prev, version, err := f.read(ctx, p)
		if err != nil {
			return 0, fmt.Errorf("zklock: reset %q: %w", resource, err)
		}
		write := func() error { _, err := f.c.Set(p, data, version); return err }
		if version < 0 {
			write = func() error { return f.create(p, data) }
		}
		err = fenceWrite(ctx, write, func(err error) {
			if err == nil {
				enforce.LogReset(context.WithoutCancel(ctx), f.logger, "zookeeper", resource, prev, to)
			}
		})
		if retryable(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("zklock: reset %q: %w", resource, err)
		}
		enforce.LogReset(ctx, f.logger, "zookeeper", resource, prev, to)
		return prev, nil
	}
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
func fenceCall(ctx context.Context, fn func() error) error { return fenceWrite(ctx, fn, nil) }

// fenceWrite is fenceCall with late, when not nil, called with fn's error
// should fn finish after ctx ended.
func fenceWrite(ctx context.Context, fn func() error, late func(error)) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error) // unbuffered: either the caller takes the result or late does
	abandoned := make(chan struct{})
	go func() {
		err := fn()
		select {
		case done <- err:
		case <-abandoned:
			if late != nil {
				late(err)
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // it finished as ctx ended: the result is real
			return err
		default:
			close(abandoned)
			return ctx.Err()
		}
	}
}

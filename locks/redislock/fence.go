package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/detach"
	"github.com/fenceguard/fenceguard/token"
	"github.com/fenceguard/fenceguard/token/enforce"
)

// Fence is a [token.Fence] that keeps each resource's high-water mark in
// Redis, for resources served by several processes (the HTTP middleware
// uses it). The check-and-advance is one script, so concurrent claims from
// any number of processes see one order. It also implements
// [token.Resetter]. It is safe for concurrent use and holds nothing to
// close.
//
// # Consistency
//
// A claim is decided on the master: an accepted claim always writes the
// mark, even when the token equals it, so a client pointed at a read-only
// replica gets READONLY and the claim fails — it never accepts from the
// replica's copy, which may lag. A stale refusal needs no write (a replica's
// mark is at most the master's, so what it refuses, the master refuses
// too). [Fence.HighWater] is a plain GET and reads whatever node the client
// reaches. A replica configured with replica-read-only no would accept
// writes of its own; never point a Fence at one.
//
// Redis replication is asynchronous: by default an accepted claim is on
// the master only, and a failover to a replica that had not received it
// brings back an older mark — a stale holder's claim is then accepted
// after a newer one was acknowledged. With [FenceOptions.Replicas] = n the
// claim is followed, in the same round trip, by WAIT n, and counts as
// accepted only when n replicas acknowledged it; otherwise it fails with a
// [*ReplicaError]. An acknowledged claim is then in the memory of n
// replicas, and survives a failover to any of them — Sentinel and Cluster
// promote the replica with the most replicated data among those they can
// reach.
//
// On a Redis Cluster, WAIT goes to the master that holds the mark's slot,
// with the redirections followed; see "redislock" in docs/design.md.
//
// WAIT is not consensus. What can still go wrong with Replicas set:
//
//   - a failover to a replica that did not acknowledge (with n below the
//     number of replicas, when those that did are down or unreachable; or
//     a manual REPLICAOF NO ONE on a lagging one): set n to the number of
//     replicas to rule that out, at the price of refused claims whenever
//     one of them is down;
//   - an acknowledging replica that restarts without persistence before
//     the failover (WAIT acknowledges memory, not disk);
//   - a refused claim is not undone: the master has written the mark and
//     may still replicate it. That only raises the mark to a token a holder
//     presented (and the check admitted), like a claim whose reply was lost.
//
// A master cut off from its replicas refuses every claim (no
// acknowledgement comes), so the old master of a split brain accepts
// nothing while a new one is elected. Redis's own min-replicas-to-write
// refuses writes on the master in a similar way, without the per-claim
// guarantee.
//
// High-water keys never expire: an expired mark would let a stale holder
// in, and there is no floor to compare a missing key with (a TTL on marks
// is not safe). Each distinct resource costs one small key; delete the
// key only of a resource that no longer exists and whose key can never
// name a resource again — a re-created resource would accept any token.
//
// # Forged tokens and Reset
//
// Before touching Redis, a claim runs the fence's [token.Check]
// ([token.DefaultCheck], a clock bound, unless FenceOptions.Check says
// otherwise; add a [token.SequencerCheck] on a [Sequencer] to refuse
// tokens above the current holder's). A refused token moves nothing.
// [Fence.Reset] sets a mark by hand — the way back from a mark a forged
// token raised (possible with [token.NoCheck], or a check the forger got
// past). It is an operator's tool, not a holder's: anyone who can call it
// can let a stale holder back in, so keep it out of request paths. Every
// reset is logged (Warn) through FenceOptions.Logger.
type Fence struct {
	client   FenceClient
	prefix   string
	check    token.Check
	logger   *slog.Logger
	replicas int
	timeout  time.Duration
}

var (
	_ token.Fence    = (*Fence)(nil)
	_ token.Resetter = (*Fence)(nil)
)

// FenceClient is what a Fence needs of a Redis client; every
// [redis.UniversalClient] satisfies it.
type FenceClient interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
	Pipeline() redis.Pipeliner
}

// FenceOptions configure a [Fence]. Zero fields select defaults.
type FenceOptions struct {
	// Prefix starts every mark's key: prefix + "{" + resource + "}". The
	// hash tag keeps each resource's key in one cluster slot. Default
	// "fenceguard:fence:".
	Prefix string

	// Check runs before every claim; nil is [token.DefaultCheck].
	Check token.Check

	// Logger receives the audit record of every [Fence.Reset]; nil is
	// slog.Default().
	Logger *slog.Logger

	// Replicas is how many replicas must acknowledge a claim (or a reset)
	// before it counts as accepted; see "Consistency" in [Fence]. Zero (or
	// less): none, and no WAIT.
	Replicas int

	// ReplicaTimeout bounds the wait for the replicas' acknowledgement.
	// Default 1s. Keep it below the client's ReadTimeout (go-redis: 3s by
	// default): the WAIT's reply must arrive within it, or the claim fails
	// with the client's timeout instead.
	ReplicaTimeout time.Duration
}

// ErrNotReplicated is the sentinel every [*ReplicaError] unwraps to.
var ErrNotReplicated = errors.New("redislock: not acknowledged by enough replicas")

// ReplicaError reports a claim or reset that fewer replicas acknowledged
// than [FenceOptions.Replicas] asked for, within the timeout. The claim is
// not accepted; the master has written the mark all the same (see
// [Fence]). It unwraps to [ErrNotReplicated].
type ReplicaError struct {
	Op       string // "claim" or "reset"
	Resource string
	Token    token.Token
	Acked    int // replicas that acknowledged
	Wanted   int // FenceOptions.Replicas
}

func (e *ReplicaError) Error() string {
	return fmt.Sprintf("redislock: %s %q with token %d: %d of %d replicas acknowledged", e.Op, e.Resource, e.Token, e.Acked, e.Wanted)
}

// Unwrap returns [ErrNotReplicated].
func (e *ReplicaError) Unwrap() error { return ErrNotReplicated }

// NewFence returns a Fence on client.
func NewFence(client FenceClient, o FenceOptions) *Fence {
	if o.Prefix == "" {
		o.Prefix = "fenceguard:fence:"
	}
	if o.ReplicaTimeout <= 0 {
		o.ReplicaTimeout = time.Second
	}
	return &Fence{client: client, prefix: o.Prefix, check: o.Check, logger: o.Logger,
		replicas: max(o.Replicas, 0), timeout: o.ReplicaTimeout}
}

func (f *Fence) key(resource string) string { return f.prefix + "{" + resource + "}" }

// Claim implements [token.Fence]: the check, then one round trip (the
// script, and WAIT in the same pipeline when Replicas is set). Besides
// [token.StaleError] and the check's refusals, it fails with a
// [*ReplicaError] when too few replicas acknowledged, and with the server's
// error (READONLY) on a replica.
func (f *Fence) Claim(ctx context.Context, resource string, t token.Token) error {
	t, err := enforce.Resolve(ctx, resource, t)
	if err != nil {
		return err
	}
	if err := enforce.Admit(ctx, f.check, resource, t); err != nil {
		return err
	}
	v, acked, err := f.detached(ctx, claimScript, f.key(resource), t.String())
	res, _ := v.([]any)
	if err != nil && (len(res) != 2 || res[0] != int64(0)) {
		return fmt.Errorf("redislock: claim %q: %w", resource, ctxerr.Wrap(ctx, err))
	}
	if len(res) == 0 {
		return fmt.Errorf("redislock: claim %q: unexpected reply %v", resource, v)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		if acked < f.replicas {
			return &ReplicaError{Op: "claim", Resource: resource, Token: t, Acked: acked, Wanted: f.replicas}
		}
		return nil
	}
	var s string
	if len(res) == 2 {
		s, _ = res[1].(string)
	}
	cur, err := token.Parse(s)
	if err != nil {
		return fmt.Errorf("redislock: claim %q: high-water key holds %q: %w", resource, s, err)
	}
	return &token.StaleError{Resource: resource, Presented: t, Current: cur}
}

// Reset implements [token.Resetter]: it sets resource's mark to to, lower
// or higher, in one script, and logs the change at Warn level
// ([enforce.LogReset], store "redis"). With Replicas set it waits for them
// like a claim, and fails with a [*ReplicaError] (after logging: the master
// has the new mark) when too few acknowledged. A key that held something
// else than a token (written by hand) is replaced all the same; Reset then
// returns 0 and an error that says what it held.
func (f *Fence) Reset(ctx context.Context, resource string, to token.Token) (token.Token, error) {
	if err := enforce.CheckReset(resource, to); err != nil {
		return 0, err
	}
	v, acked, err := f.detached(ctx, resetScript, f.key(resource), to.String())
	if err != nil {
		return 0, fmt.Errorf("redislock: reset %q: %w", resource, ctxerr.Wrap(ctx, err))
	}
	s, _ := v.(string)
	var prev token.Token
	if s != "" {
		if prev, err = token.Parse(s); err != nil {
			// Not a mark a claim wrote; it is replaced all the same.
			enforce.LogReset(ctx, f.logger, "redis", resource, 0, to)
			return 0, fmt.Errorf("redislock: reset %q: the mark held %q (now %d): %w", resource, s, to, err)
		}
	}
	enforce.LogReset(ctx, f.logger, "redis", resource, prev, to)
	if acked < f.replicas {
		return prev, &ReplicaError{Op: "reset", Resource: resource, Token: to, Acked: acked, Wanted: f.replicas}
	}
	return prev, nil
}

// HighWater returns the highest token resource has accepted, 0 if none. It
// is a plain read of whatever node the client reaches (a replica's copy may
// lag); it decides nothing.
func (f *Fence) HighWater(ctx context.Context, resource string) (token.Token, error) {
	s, err := detach.Call(nil, ctx, func() (string, error) {
		s, err := f.client.Get(ctx, f.key(resource)).Result()
		reloadOnNetError(ctx, f.client, err)
		return s, err
	})
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redislock: high-water %q: %w", resource, ctxerr.Wrap(ctx, err))
	}
	return token.Parse(s)
}

// detached is run, returning ctx's error as soon as ctx is done; the
// command then finishes in the background.
func (f *Fence) detached(ctx context.Context, s *redis.Script, key string, args ...any) (any, int, error) {
	type reply struct {
		v     any
		acked int
	}
	r, err := detach.Call(nil, ctx, func() (reply, error) {
		v, acked, err := f.run(ctx, s, key, args...)
		return reply{v, acked}, err
	})
	return r.v, r.acked, err
}

// run runs script on key. With replicas wanted, it sends the script and
// WAIT in one pipeline on the connection of the key's master, and returns
// how many replicas acknowledged.
func (f *Fence) run(ctx context.Context, s *redis.Script, key string, args ...any) (any, int, error) {
	keys := []string{key}
	if f.replicas == 0 {
		v, err := s.Run(ctx, f.client, keys, args...).Result()
		reloadOnNetError(ctx, f.client, err)
		return v, 0, err
	}
	if c, ok := f.client.(clusterClient); ok {
		return f.runCluster(ctx, c, s, keys, args...)
	}
	var p interface{ Pipeline() redis.Pipeliner } = f.client
	if c, ok := f.client.(interface {
		GetShardClientForKey(key string) (*redis.Client, error)
	}); ok { // a Ring: the key's shard
		sc, err := c.GetShardClientForKey(key)
		if err != nil {
			return nil, 0, err
		}
		p = sc
	}
	return f.runOn(ctx, p, false, s, keys, args...)
}

// runOn sends the script (ASKING first, when asking) and WAIT in one
// pipeline on p, falling back from EVALSHA to EVAL on NOSCRIPT.
func (f *Fence) runOn(ctx context.Context, p interface{ Pipeline() redis.Pipeliner }, asking bool, s *redis.Script, keys []string, args ...any) (any, int, error) {
	v, n, err := f.pipelineWait(ctx, p, asking, func(pipe redis.Pipeliner) *redis.Cmd { return s.EvalSha(ctx, pipe, keys, args...) })
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Not loaded yet: send the source.
		v, n, err = f.pipelineWait(ctx, p, asking, func(pipe redis.Pipeliner) *redis.Cmd { return s.Eval(ctx, pipe, keys, args...) })
	}
	return v, n, err
}

// clusterClient is what a Fence needs of a [redis.ClusterClient] to send
// WAIT to the node that holds a key's slot.
type clusterClient interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	ReloadState(ctx context.Context)
}

// clusterAttempts bounds the redirections a claim with WAIT follows on a
// Cluster (one MOVED after a failover or a resharding, then an ASK while a
// slot moves, a TRYAGAIN or two).
const clusterAttempts = 5

// runCluster is run on a Redis Cluster. The keyless WAIT counts the
// acknowledgements of writes made on its own connection, so it must go on
// the connection that ran the script, to the master that holds the key's
// slot: a ClusterClient's pipeline would send WAIT to a node of its
// choosing. The script and WAIT therefore go, in one pipeline, to the
// client of the key's master, and the redirections the ClusterClient would
// follow are followed here: on MOVED the slot map is reloaded (at once,
// not lazily) and the claim sent to the new master; on ASK (the slot is
// being migrated, the key is on the target already) it goes to the target
// with ASKING; on TRYAGAIN and CLUSTERDOWN it is sent again after a pause.
// Each of these replies means the script did not run. Any other error
// schedules a reload of the slot map (a master that died) and is returned.
func (f *Fence) runCluster(ctx context.Context, c clusterClient, s *redis.Script, keys []string, args ...any) (any, int, error) {
	var askAddr string
	for attempt := 1; ; attempt++ {
		var node *redis.Client
		var err error
		if askAddr != "" {
			node, err = masterAt(ctx, c, askAddr)
		} else {
			node, err = c.MasterForKey(ctx, keys[0])
		}
		if err != nil {
			return nil, 0, err
		}
		v, n, err := f.runOn(ctx, node, askAddr != "", s, keys, args...)
		if err == nil || attempt == clusterAttempts {
			return v, n, err
		}
		askAddr = ""
		switch {
		case redis.HasErrorPrefix(err, "MOVED"):
			// A forced reload: MasterForKey must see the new owner.
			if err := c.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }); err != nil {
				return nil, 0, err
			}
		case redis.HasErrorPrefix(err, "ASK"):
			if askAddr = redirectAddr(err); askAddr == "" {
				return v, n, err
			}
		case redis.HasErrorPrefix(err, "TRYAGAIN"), redis.HasErrorPrefix(err, "CLUSTERDOWN"):
			t := time.NewTimer(time.Duration(attempt) * 10 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return v, n, err
			case <-t.C:
			}
		default:
			reloadOnNetError(ctx, c, err) // the node may be gone
			return v, n, err
		}
	}
}

// redirectAddr returns the address of a MOVED or ASK reply ("ASK 3999
// 127.0.0.1:6381").
func redirectAddr(err error) string {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return ""
	}
	f := strings.Fields(rerr.Error())
	if len(f) != 3 {
		return ""
	}
	return f[2]
}

// masterAt returns the client of the master with address addr.
func masterAt(ctx context.Context, c clusterClient, addr string) (*redis.Client, error) {
	var mu sync.Mutex
	var found *redis.Client
	err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			found = m
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("redislock: redirected to %s, which is not a master of the cluster", addr)
	}
	return found, nil
}

// pipelineWait sends the command eval queues, then WAIT, in one pipeline
// (ASKING before them when asking).
func (f *Fence) pipelineWait(ctx context.Context, p interface{ Pipeline() redis.Pipeliner }, asking bool, eval func(redis.Pipeliner) *redis.Cmd) (any, int, error) {
	pipe := p.Pipeline()
	if asking {
		pipe.Do(ctx, "asking")
	}
	cmd := eval(pipe)
	wait := pipe.Do(ctx, "wait", f.replicas, ms(f.timeout)) // 0 would wait for ever
	_, _ = pipe.Exec(ctx)                                   // each command carries its own error
	v, err := cmd.Result()
	if err != nil {
		return nil, 0, err
	}
	n, err := wait.Int64()
	if err != nil {
		// The script's reply comes back too: a refusal stands whatever
		// WAIT says (on a replica WAIT is an error, and a refusal read
		// there is safe: the master's mark is at least as high).
		return v, 0, fmt.Errorf("WAIT %d: %w", f.replicas, err)
	}
	return v, int(n), nil
}

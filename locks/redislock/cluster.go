package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks"
)

// stateReloader is a [redis.ClusterClient]'s ReloadState.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// reloadOnNetError schedules a reload of a Cluster client's slot map when
// err is not a reply of the server: a master that died. go-redis does not
// reload on its own when a node refuses connections (it reloads on MOVED,
// ASK and READONLY, and when its map is older than
// ClusterStateReloadInterval, a minute by default), so without this every
// call on the killed master's slots would fail, after its replica took
// over, until that minute was up. The reload is lazy and coalesced: calls
// that fail together cost one CLUSTER SLOTS.
func reloadOnNetError(ctx context.Context, c any, err error) {
	if err == nil {
		return
	}
	r, ok := c.(stateReloader)
	if !ok {
		return
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		r.ReloadState(ctx)
	}
}

// reloadingClient is a Cluster client whose script calls reload its slot
// map after a network error (see reloadOnNetError).
type reloadingClient struct {
	Client
}

func (c reloadingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return reloadingScripter{c.Client}.Eval(ctx, script, keys, args...)
}

func (c reloadingClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return reloadingScripter{c.Client}.EvalSha(ctx, sha1, keys, args...)
}

// reloadingScripter is reloadingClient for a plain Scripter (the
// Sequencer's).
type reloadingScripter struct {
	redis.Scripter
}

func (c reloadingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return clusterRun(ctx, c.Scripter, func() *redis.Cmd { return c.Scripter.Eval(ctx, script, keys, args...) })
}

func (c reloadingScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return clusterRun(ctx, c.Scripter, func() *redis.Cmd { return c.Scripter.EvalSha(ctx, sha1, keys, args...) })
}

// Backoff of the retries on TRYAGAIN (see clusterRun).
const (
	tryAgainMin = 5 * time.Millisecond
	tryAgainMax = 100 * time.Millisecond
)

// clusterRun runs a script on a Cluster client c: it reloads the slot map
// after a network error (reloadOnNetError) and runs the script again, with
// a backoff from tryAgainMin doubling up to tryAgainMax, while its slot is
// moving (isSlotMoving), until ctx ends.
//
// TRYAGAIN is Redis refusing a command whose keys are not all on one node
// while their slot migrates; go-redis retries it, and follows the source's
// ASK, only ClusterOptions.MaxRedirects times (3 by default), a few
// milliseconds. The lock's scripts name four keys, of which the queue and
// its deadlines exist only while someone waits, so nearly every acquire
// and release of a lock in a migrating slot gets it, for as long as the
// migration lasts. Redis refuses before it runs the script, so running it
// again is always safe. When ctx ends first, the error wraps ctx's error
// and the last refusal.
func clusterRun(ctx context.Context, c any, run func() *redis.Cmd) *redis.Cmd {
	wait := tryAgainMin
	var t *time.Timer
	for {
		cmd := run()
		err := cmd.Err()
		reloadOnNetError(ctx, c, err)
		if err == nil || !isSlotMoving(err) {
			return cmd
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			cmd.SetErr(fmt.Errorf("%w (the lock's slot is migrating: %w)", ctx.Err(), err))
			return cmd
		case <-t.C:
		}
		wait = min(2*wait, tryAgainMax)
	}
}

// isSlotMoving reports whether err is a reply of a node that refused the
// command, before running it, because its slot is moving: TRYAGAIN, or the
// ASK or MOVED redirection go-redis had no redirections left to follow
// (ClusterOptions.MaxRedirects; midway through a migration the source
// answers ASK and the target TRYAGAIN, in turn).
func isSlotMoving(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	s := rerr.Error()
	return strings.HasPrefix(s, "TRYAGAIN") || strings.HasPrefix(s, "ASK ") || strings.HasPrefix(s, "MOVED ")
}

// checkSlot refuses, on a Cluster client, a key whose lock keys would not
// share a slot: Redis takes the hash tag from the first '{' of a key name to
// the first '}' after it, and hashes the whole name when that tag is empty.
// The lock's keys are <prefix>{<key>}…; their tag is empty, and each of them
// lands in a slot of its own (the scripts would fail with CROSSSLOT), when
// the first '{' is followed at once by '}': a key that starts with '}' (and
// a prefix without '{'), or a prefix that holds "{}". On other clients every
// key works, so nothing is refused there.
func checkSlot(c any, prefix, key string) error {
	if _, ok := c.(stateReloader); !ok {
		return nil
	}
	name := prefix + "{" + key + "}"
	i := strings.IndexByte(name, '{')
	if name[i+1] == '}' {
		return fmt.Errorf("%w: key %q with prefix %q: the hash tag of its Redis keys would be empty, so they would not share a Cluster slot (keep '}' off the start of keys and \"{}\" out of prefixes)", locks.ErrInvalidArgument, key, prefix)
	}
	return nil
}

// ReloadState passes the Cluster client's on, so the wrapper is known as a
// Cluster client still (checkSlot).
func (c reloadingClient) ReloadState(ctx context.Context) { c.Client.(stateReloader).ReloadState(ctx) }

// ReloadState: see reloadingClient.ReloadState.
func (c reloadingScripter) ReloadState(ctx context.Context) {
	c.Scripter.(stateReloader).ReloadState(ctx)
}

package redislock

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
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
	cmd := c.Client.Eval(ctx, script, keys, args...)
	reloadOnNetError(ctx, c.Client, cmd.Err())
	return cmd
}

func (c reloadingClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := c.Client.EvalSha(ctx, sha1, keys, args...)
	reloadOnNetError(ctx, c.Client, cmd.Err())
	return cmd
}

// reloadingScripter is reloadingClient for a plain Scripter (the
// Sequencer's).
type reloadingScripter struct {
	redis.Scripter
}

func (c reloadingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	cmd := c.Scripter.Eval(ctx, script, keys, args...)
	reloadOnNetError(ctx, c.Scripter, cmd.Err())
	return cmd
}

func (c reloadingScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := c.Scripter.EvalSha(ctx, sha1, keys, args...)
	reloadOnNetError(ctx, c.Scripter, cmd.Err())
	return cmd
}

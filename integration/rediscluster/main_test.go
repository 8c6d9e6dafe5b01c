package rediscluster

import (
	"context"
	"errors"
	"github.com/redis/go-redis/v9"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { itest.Main(m) }

// nowMicros is the server clock of c, in µs.
func nowMicros(t *testing.T, ctx context.Context, c redis.Cmdable) token.Token {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return token.Token(tm.UnixMicro())
}

// newClient is a client on addr whose calls are bounded by their context.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func newLocker(t *testing.T, c redislock.Client, o redislock.Options) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acquireRetry acquires key, retrying through the errors of a failover.
func acquireRetry(ctx context.Context, t *testing.T, l locks.Locker, key string, ttl time.Duration) locks.Lease {
	t.Helper()
	var last error
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		le, err := l.Acquire(actx, key, ttl)
		cancel()
		if err == nil {
			return le
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("acquire %q: %v", key, last)
	return nil
}

// checkSequencer asks seq about key n times and fails on any answer other
// than want (the holder's token) unless it is an ErrReplica refusal when
// refusals are allowed; it then runs a SequencerCheck for a forged token
// just above the holder's, which must be refused. It returns how many
// answers came and how many refusals.
func checkSequencer(t *testing.T, ctx context.Context, name string, seq token.Sequencer, key string, want token.Token, n int) (answers, refusals int) {
	t.Helper()
	for range n {
		got, err := seq.Current(ctx, key)
		switch {
		case err == nil && got == want:
			answers++
		case err == nil:
			t.Errorf("%s: Current = %d, the holder's token is %d (a stale answer: a forged token in between passes SequencerCheck)", name, got, want)
			return
		case errors.Is(err, redislock.ErrReplica):
			refusals++
		default:
			t.Errorf("%s: Current: %v (want the token or ErrReplica)", name, err)
			return
		}
	}
	chk := token.SequencerCheck(seq, token.SequencerOptions{CacheSize: -1})
	if err := chk.Check(ctx, key, want+1); err == nil {
		t.Errorf("%s: SequencerCheck admitted forged token %d above the holder's %d", name, want+1, want)
	}
	return answers, refusals
}

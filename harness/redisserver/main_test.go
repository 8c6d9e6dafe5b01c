package redisserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// conn is a one-connection client for the tests, closed at the end of the
// test; a nil reply is a nil value, not an error.
type conn struct{ c *redis.Client }

func redisConn(t *testing.T, addr string) *conn {
	t.Helper()
	c := client(addr)
	t.Cleanup(func() { c.Close() })
	return &conn{c}
}

func (c *conn) Do(ctx context.Context, args ...any) (any, error) {
	v, err := c.c.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

func (c *conn) String(ctx context.Context, args ...any) (string, bool, error) {
	v, err := c.Do(ctx, args...)
	s, _ := v.(string)
	return s, v != nil, err
}

func (c *conn) Int(ctx context.Context, args ...any) (int64, error) {
	v, err := c.Do(ctx, args...)
	n, _ := v.(int64)
	return n, err
}

func (c *conn) Info(ctx context.Context, section string) (map[string]string, error) {
	s, err := c.c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// redisDo runs one command on a fresh connection, within d.
func redisDo(addr string, d time.Duration, args ...any) (any, error) {
	ctx, cancel := ctxFor(d)
	defer cancel()
	v, err := do(ctx, addr, args...)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// errPrefix is the error code of a Redis error reply ("MOVED", "READONLY").
func errPrefix(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	code, _, _ := strings.Cut(re.Error(), " ")
	return code
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// eventually polls cond until it returns nil or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	harness.Eventually(t, d, func() error {
		if err := cond(); err != nil {
			return errors.New(what + ": " + err.Error())
		}
		return nil
	})
}

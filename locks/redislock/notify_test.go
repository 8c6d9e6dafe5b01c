package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// The notifier (internal/rnotify, here on go-redis) follows the channel's
// waiters and its confirmations, also when the last waiter leaves and a new
// one comes at once (an UNSUBSCRIBE and a new SUBSCRIBE in flight): a
// registration returns only once its own SUBSCRIBE is confirmed, and then
// receives what is published.
func TestNotifierRegisterAfterTheLastWaiterLeft(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: db.Addr})
	t.Cleanup(func() { c.Close() })
	n := notifier(c)
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := db.Prefix + "ch"
	if n.Subscribed(ch) {
		t.Fatal("subscribed before any waiter")
	}
	for i := range 50 {
		id := string(rune('a' + i%26))
		wake, err := n.Register(ctx, ch, id)
		if err != nil {
			t.Fatal(err)
		}
		if !n.Subscribed(ch) {
			t.Fatalf("round %d: not subscribed after Register returned", i)
		}
		if err := c.Publish(ctx, ch, id+"|"+id).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-wake:
			if v != id {
				t.Fatalf("round %d: woken with %q, want %q", i, v, id)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: the wake-up published after Register returned never came", i)
		}
		n.Unregister(ch, id)
		if n.Subscribed(ch) {
			t.Fatalf("round %d: still subscribed without waiters", i)
		}
	}
}

// deadRouter names a master nobody listens on, as a stale slot map would
// after the master died.
type deadRouter struct{ c *redis.Client }

func (r deadRouter) MasterForKey(context.Context, string) (*redis.Client, error) { return r.c, nil }

// A master's subscriber that cannot subscribe (the map named a dead node)
// does not fail the waiter: it subscribes through the Cluster client
// instead, and hears the release.
func TestMasterNotifierFallsBackWhenTheMasterIsGone(t *testing.T) {
	t.Parallel()
	c := redisserver.NewCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Dialer: c.Dialer(), MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	n := newMasterNotifier(deadRouter{dead}, cc)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := "fg:{dead}:wake"
	wake, err := n.Register(ctx, ch, "w")
	if err != nil {
		t.Fatalf("Register with the routed master gone: %v", err)
	}
	if err := cc.Publish(ctx, ch, "w|7").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-wake:
		if v != "7" {
			t.Fatalf("woken with %q, want 7", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by the release")
	}
	n.Unregister(ch, "w")
}

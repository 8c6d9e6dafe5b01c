package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/rnotify"
)

// notifier returns the shared pub/sub reader of c's blocked acquires.
func notifier(c Client) *rnotify.Notifier {
	return rnotify.New(rnotify.Client{
		Open:   func(ctx context.Context) rnotify.PubSub { return c.Subscribe(ctx) },
		Decode: decodePubSub,
	})
}

// decodePubSub reads what go-redis's PubSub.Receive returns.
func decodePubSub(msg any) rnotify.Event {
	switch m := msg.(type) {
	case *redis.Message:
		return rnotify.Event{Message: true, Channel: m.Channel, Payload: m.Payload}
	case *redis.Subscription:
		return rnotify.Event{Subscribed: m.Kind == "subscribe", Channel: m.Channel}
	}
	return rnotify.Event{}
}

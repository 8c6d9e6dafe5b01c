package rnotify

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Subscriber is what [ForGoRedis] needs of a go-redis client.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// ForGoRedis returns a Notifier on pub/sub connections of c.
func ForGoRedis(c Subscriber) *Notifier {
	return New(Client{
		Open:   func(ctx context.Context) PubSub { return c.Subscribe(ctx) },
		Decode: decodeGoRedis,
	})
}

// decodeGoRedis reads what go-redis's PubSub.Receive returns.
func decodeGoRedis(msg any) Event {
	switch m := msg.(type) {
	case *redis.Message:
		return Event{Message: true, Channel: m.Channel, Payload: m.Payload}
	case *redis.Subscription:
		return Event{Subscribed: m.Kind == "subscribe", Channel: m.Channel}
	}
	return Event{}
}

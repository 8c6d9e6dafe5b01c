package redislock

import (
	"context"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/rnotify"
)

// CurrentWithoutShebang runs the Sequencer's script without its masterOnly
// shebang, which a replica runs: the control of the test that the
// Sequencer refuses replicas.
func CurrentWithoutShebang(ctx context.Context, c redis.Scripter, prefix, key string) (string, error) {
	src := reflect.ValueOf(currentScript).Elem().FieldByName("src").String()
	if !strings.HasPrefix(src, masterOnly) {
		panic("redislock: the Sequencer's script does not start with masterOnly")
	}
	s := redis.NewScript(strings.TrimPrefix(src, masterOnly))
	return s.Run(ctx, c, keysFor(prefix, key).bound()).Text()
}

// OneSubscriber gives a fresh l the notifier of a plain client — one
// subscriber on whichever node — for the control of the test that waiters
// listen on their lock's master.
func OneSubscriber(l *Locker) {
	l.notify.Close()
	l.notify = rnotify.ForGoRedis(l.client)
}

// SetNotifierLinger sets how long an idle master's subscriber stays open,
// until the returned func restores it.
func SetNotifierLinger(d time.Duration) func() {
	old := notifierLinger
	notifierLinger = d
	return func() { notifierLinger = old }
}

package lockdelay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// holderEnv carries a holder process's configuration (JSON): the test
// binary, started with it set, runs as the holder (see holderMain).
const holderEnv = "FENCEGUARD_LOCKDELAY_HOLDER"

func TestMain(m *testing.M) {
	if js, ok := os.LookupEnv(holderEnv); ok {
		os.Exit(holderMain(js))
	}
	harness.DefaultParallel(parallel)
	itest.Main(m)
}

// parallel is how many tests run at once unless -test.parallel says
// otherwise. The backends' schedules are mostly a frozen holder process
// waiting out its lease, each on keys of its own: go test's default of
// GOMAXPROCS would run two of the four at once.
const parallel = 4

// config is what a locker is built from, in the test process and in the
// holder's alike.
type config struct {
	Backend string // redislock, redlock, etcdlock, zklock
	Addrs   []string
	Prefix  string
	Delay   time.Duration

	// The holder's only.
	Key      string
	TTL      time.Duration
	Resource string // the file both holders append to
}

// newLocker builds cfg's locker; close releases what it holds.
func newLocker(cfg config) (l locks.Locker, close func(), err error) {
	switch cfg.Backend {
	case "redislock":
		c := redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], ContextTimeoutEnabled: true, MaxRetries: -1})
		rl, err := redislock.New(c, redislock.Options{Prefix: cfg.Prefix, LockDelay: cfg.Delay})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return rl, func() { rl.Close(); c.Close() }, nil
	case "redlock":
		var cs []redlock.Client
		for _, a := range cfg.Addrs {
			cs = append(cs, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1}))
		}
		closeAll := func() {
			for _, c := range cs {
				c.(*redis.Client).Close()
			}
		}
		rl, err := redlock.New(cs, redlock.Options{Prefix: cfg.Prefix, LockDelay: cfg.Delay})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return rl, func() { rl.Close(); closeAll() }, nil
	case "etcdlock":
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Addrs, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		el, err := etcdlock.New(c, etcdlock.Options{Prefix: cfg.Prefix, LockDelay: cfg.Delay})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return el, func() { el.Close(); c.Close() }, nil
	case "zklock":
		zl, err := zklock.New(cfg.Addrs, zklock.Options{Prefix: cfg.Prefix, Logger: itest.QuietZK{}, LockDelay: cfg.Delay})
		if err != nil {
			return nil, nil, err
		}
		return zl, func() { zl.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown backend %q", cfg.Backend)
}

// write appends one line, "who unix-nanos", to the resource: the unfenced
// write. O_APPEND makes the file's order the order of the writes.
func write(path, who string) (time.Time, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	_, err = fmt.Fprintf(f, "%s %d\n", who, now.UnixNano())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return now, err
}

// holderMain is the holder process: it takes the lock, says so on stdout
// ("acquired <token>"), and then — frozen there by the test, resumed past
// its lease — reads "write" from stdin, writes to the resource without
// looking at its lease (an unfenced resource takes any write), and
// releases. It returns the exit code.
func holderMain(js string) int {
	var cfg config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "holder: bad configuration:", err)
		return 2
	}
	l, closeLocker, err := newLocker(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	defer closeLocker()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, cfg.Key, cfg.TTL)
	// Redlock gives up when too few nodes answered within their timeout,
	// as they may not on a loaded machine: try again.
	for qe := (*redlock.QuorumError)(nil); errors.As(err, &qe) && ctx.Err() == nil; {
		lease, err = l.Acquire(ctx, cfg.Key, cfg.TTL)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder: acquire:", err)
		return 1
	}
	fmt.Printf("acquired %d\n", lease.Token())
	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() || sc.Text() != "write" {
		fmt.Fprintln(os.Stderr, "holder: no write command")
		return 1
	}
	if _, err := write(cfg.Resource, "A"); err != nil {
		fmt.Fprintln(os.Stderr, "holder: write:", err)
		return 1
	}
	fmt.Printf("released %v\n", lease.Release(ctx))
	return 0
}

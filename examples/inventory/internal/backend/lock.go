package backend

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// The lock services a worker can lock with.
const (
	Etcd      = "etcd"
	Redis     = "redis"
	Redlock   = "redlock"
	ZooKeeper = "zk"
)

// LockConfig selects a lock service and says where it is.
type LockConfig struct {
	Kind    string   // Etcd (default), Redis, Redlock or ZooKeeper
	Etcd    []string // etcd endpoints; empty: the demo starts an embedded etcd
	Redis   string   // host:port of one Redis
	Redlock []string // host:port of independent Redis nodes (3 or 5)
	ZK      []string // host:port of a ZooKeeper ensemble
	Prefix  string   // where the locks live in the service; default: the locker's own
}

// RegisterFlags defines the lock flags on fs, storing into c.
func (c *LockConfig) RegisterFlags(fs *flag.FlagSet) {
	if c.Kind == "" {
		c.Kind = Etcd
	}
	fs.StringVar(&c.Kind, "lock", c.Kind, "lock service: etcd, redis, redlock or zk")
	fs.Func("etcd", "etcd endpoints, comma-separated (default: an embedded etcd, demo only)", listFlag(&c.Etcd))
	fs.StringVar(&c.Redis, "redis", c.Redis, "Redis address host:port, for --lock=redis")
	fs.Func("redlock", "independent Redis nodes host:port, comma-separated, for --lock=redlock", listFlag(&c.Redlock))
	fs.Func("zk", "ZooKeeper servers host:port, comma-separated, for --lock=zk", listFlag(&c.ZK))
	fs.StringVar(&c.Prefix, "lock-prefix", c.Prefix, "key prefix (etcd, Redis) or znode (ZooKeeper) of the locks")
}

func listFlag(dst *[]string) func(string) error {
	return func(s string) error {
		*dst = nil
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				*dst = append(*dst, f)
			}
		}
		return nil
	}
}

// Args returns c as the flags RegisterFlags reads.
func (c LockConfig) Args() []string {
	args := []string{"--lock=" + c.Kind}
	add := func(name string, vals []string) {
		if len(vals) > 0 {
			args = append(args, "--"+name+"="+strings.Join(vals, ","))
		}
	}
	add("etcd", c.Etcd)
	if c.Redis != "" {
		args = append(args, "--redis="+c.Redis)
	}
	add("redlock", c.Redlock)
	add("zk", c.ZK)
	if c.Prefix != "" {
		args = append(args, "--lock-prefix="+c.Prefix)
	}
	return args
}

// Validate reports a config OpenLocker cannot use. needEtcd is false where an
// embedded etcd stands in for missing endpoints.
func (c LockConfig) Validate(needEtcd bool) error {
	switch c.Kind {
	case Etcd:
		if needEtcd && len(c.Etcd) == 0 {
			return errors.New("--lock=etcd needs --etcd endpoints")
		}
	case Redis:
		if c.Redis == "" {
			return errors.New("--lock=redis needs --redis host:port")
		}
	case Redlock:
		if len(c.Redlock) < 3 {
			return errors.New("--lock=redlock needs --redlock with at least 3 independent nodes")
		}
	case ZooKeeper:
		if len(c.ZK) == 0 {
			return errors.New("--lock=zk needs --zk servers")
		}
	default:
		return fmt.Errorf("unknown --lock=%q: want etcd, redis, redlock or zk", c.Kind)
	}
	return nil
}

// String describes the lock service, e.g. "etcd at 127.0.0.1:2379".
func (c LockConfig) String() string {
	switch c.Kind {
	case Etcd:
		return "etcd at " + strings.Join(c.Etcd, ",")
	case Redis:
		return "Redis at " + c.Redis
	case Redlock:
		return fmt.Sprintf("Redlock over %d Redis nodes", len(c.Redlock))
	case ZooKeeper:
		return "ZooKeeper at " + strings.Join(c.ZK, ",")
	}
	return c.Kind
}

// OpenLocker connects to the lock service. The caller must call close when
// done with the locker (and its leases).
func OpenLocker(ctx context.Context, c LockConfig, log *slog.Logger) (l locks.Locker, close func() error, err error) {
	if err := c.Validate(true); err != nil {
		return nil, nil, err
	}
	switch c.Kind {
	case Etcd:
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, fmt.Errorf("etcd: %w", err)
		}
		l, err := etcdlock.New(cli, etcdlock.Options{Prefix: c.Prefix})
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
	case Redis:
		cli := redis.NewClient(&redis.Options{Addr: c.Redis})
		l, err := redislock.New(cli, redislock.Options{Prefix: c.Prefix})
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
	case Redlock:
		var nodes []redlock.Client
		var clients []*redis.Client
		for _, addr := range c.Redlock {
			// One dial attempt: a dead node must not stall every acquire.
			cli := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
			nodes, clients = append(nodes, cli), append(clients, cli)
		}
		closeAll := func() error {
			var errs []error
			for _, cli := range clients {
				errs = append(errs, cli.Close())
			}
			return errors.Join(errs...)
		}
		l, err := redlock.New(nodes, redlock.Options{Prefix: c.Prefix})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return l, func() error { return errors.Join(l.Close(), closeAll()) }, nil
	case ZooKeeper:
		l, err := zklock.New(c.ZK, zklock.Options{Prefix: c.Prefix, Logger: zkLogger{log}})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	}
	panic("unreachable: Validate accepted " + c.Kind)
}

// zkLogger sends go-zookeeper's chatter to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.log.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

// OpenSequencer connects to the lock service c names and returns its
// token.Sequencer: the resource side's question "which token does the
// current grant of this lock carry?", asked with a plain client (no
// locker, no pub/sub). The caller must call close when done.
func OpenSequencer(ctx context.Context, c LockConfig, log *slog.Logger) (seq token.Sequencer, close func() error, err error) {
	if err := c.Validate(true); err != nil {
		return nil, nil, err
	}
	switch c.Kind {
	case Etcd:
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, fmt.Errorf("etcd: %w", err)
		}
		return etcdlock.NewSequencer(cli, c.Prefix), cli.Close, nil
	case Redis:
		cli := redis.NewClient(&redis.Options{Addr: c.Redis})
		return redislock.NewSequencer(cli, c.Prefix), cli.Close, nil
	case Redlock:
		var nodes []redlock.Client
		var clients []*redis.Client
		for _, addr := range c.Redlock {
			cli := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
			nodes, clients = append(nodes, cli), append(clients, cli)
		}
		return redlock.NewSequencer(nodes, c.Prefix), func() error {
			var errs []error
			for _, cli := range clients {
				errs = append(errs, cli.Close())
			}
			return errors.Join(errs...)
		}, nil
	case ZooKeeper:
		conn, events, err := zk.Connect(c.ZK, 10*time.Second, zk.WithLogger(zkLogger{log}), zk.WithLogInfo(false))
		if err != nil {
			return nil, nil, fmt.Errorf("zookeeper: %w", err)
		}
		go func() {
			for range events { // drained until Close ends them
			}
		}()
		prefix := c.Prefix
		return zklock.NewSequencer(conn, prefix), func() error { conn.Close(); return nil }, nil
	}
	panic("unreachable: Validate accepted " + c.Kind)
}

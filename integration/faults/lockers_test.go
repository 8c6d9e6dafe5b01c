package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// The lockers.
const (
	memLock   = "memlock"
	redisLock = "redis"
	redLock   = "redlock"
	etcdLock  = "etcd"
	zkLock    = "zk"
)

// lockConfig says which lock service a client uses and where it is.
type lockConfig struct {
	Kind    string            `json:"kind"`
	Addrs   []string          `json:"addrs"` // one Redis, the Redlock nodes, etcd endpoints, ZooKeeper servers
	Prefix  string            `json:"prefix"`
	AddrMap map[string]string `json:"addr_map,omitempty"` // redis-cluster: node address → the address to dial (the victim's proxy)
}

// openLocker connects to the lock service of lc. memlock is not opened here:
// it lives in the process of its clients (see newClient).
func openLocker(ctx context.Context, lc lockConfig, log *slog.Logger) (locks.Locker, func() error, error) {
	switch lc.Kind {
	case redisLock:
		cli := redis.NewClient(redisOptions(lc.Addrs[0]))
		l, err := redislock.New(cli, redislock.Options{Prefix: lc.Prefix})
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
	case redisClusterLock:
		return openClusterLocker(lc)
	case redLock:
		var nodes []redlock.Client
		var clis []*redis.Client
		for _, a := range lc.Addrs {
			cli := redis.NewClient(redisOptions(a))
			nodes, clis = append(nodes, cli), append(clis, cli)
		}
		closeAll := func() error {
			var errs []error
			for _, c := range clis {
				errs = append(errs, c.Close())
			}
			return errors.Join(errs...)
		}
		l, err := redlock.New(nodes, redlock.Options{Prefix: lc.Prefix})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return l, func() error { return errors.Join(l.Close(), closeAll()) }, nil
	case etcdLock:
		cli, err := clientv3.New(etcdConfig(lc.Addrs))
		if err != nil {
			return nil, nil, err
		}
		l, err := etcdlock.New(cli, etcdlock.Options{Prefix: lc.Prefix})
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
	case zkLock:
		l, err := zklock.New(lc.Addrs, zklock.Options{Prefix: lc.Prefix, Logger: zkLogger{log}})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	}
	if l, closer, err, ok := openEnsembleLocker(lc, zkLogger{log}); ok {
		return l, closer, err
	}
	return nil, nil, fmt.Errorf("no locker %q in a client process", lc.Kind)
}

// redisOptions: one dial attempt, short, so that a node that is down or cut
// off fails fast instead of stalling every call (as a Redlock deployment
// would configure it).
func redisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, DialTimeout: time.Second, DialerRetries: 1}
}

// etcdConfig: reconnect quickly once a member is back (gRPC's default backoff
// grows to two minutes).
func etcdConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	}
}

// zkLogger sends go-zookeeper's chatter to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.log.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

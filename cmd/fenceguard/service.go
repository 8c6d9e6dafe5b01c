package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

// conn holds the clients of one lock service or store, reached.
type conn struct {
	ep      *endpoint
	redis   redis.UniversalClient // redis, rediss, sentinel, cluster
	nodes   []*redis.Client       // redlock
	etcd    *clientv3.Client
	zk      *zk.Conn
	closers []func() error
}

func (c *conn) Close() error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	return errors.Join(errs...)
}

// dial connects to the service e names and checks, within timeout, that it
// answers: an error wrapping exitUnavailable when it does not. The
// connection is closed on error.
func dial(ctx context.Context, e *endpoint, timeout time.Duration, log *slog.Logger) (_ *conn, err error) {
	c := &conn{ep: e}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	redis.SetLogger(redisLogger{log})
	// The Redis clients are built as the lockers' docs ask: calls bounded
	// by their contexts (ContextTimeoutEnabled), and no retries of their
	// own (MaxRetries -1): the guard retries, and keeps the cause.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	unreachable := func(err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v (--connect-timeout)", timeout)
		}
		return withCode(exitUnavailable, fmt.Errorf("%s unreachable: %w", e, err))
	}
	switch e.scheme {
	case schemeRedis, schemeRediss:
		if err := e.singleHost(); err != nil {
			return nil, err
		}
		db, err := redisDB(e, e.path)
		if err != nil {
			return nil, err
		}
		o := &redis.Options{Addr: e.hosts[0], Username: e.user, Password: e.password, DB: db, DialTimeout: timeout, ContextTimeoutEnabled: true, MaxRetries: -1}
		if e.scheme == schemeRediss {
			o.TLSConfig = tlsFor(e.hosts[0])
		}
		cli := redis.NewClient(o)
		c.redis = cli
		c.closers = append(c.closers, cli.Close)
	case schemeSentinel:
		master, dbPath, _ := strings.Cut(e.path, "/")
		if master == "" {
			return nil, usageErrorf("%s: name the master: redis+sentinel://host:port,.../MASTER[/DB]", e)
		}
		db, err := redisDB(e, dbPath)
		if err != nil {
			return nil, err
		}
		cli := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: master, SentinelAddrs: e.hosts,
			Username: e.user, Password: e.password, DB: db, DialTimeout: timeout,
			ContextTimeoutEnabled: true, MaxRetries: -1,
		})
		c.redis = cli
		c.closers = append(c.closers, cli.Close)
	case schemeCluster:
		if err := e.noPath(); err != nil {
			return nil, err
		}
		cli := redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.hosts, Username: e.user, Password: e.password, DialTimeout: timeout, ContextTimeoutEnabled: true, MaxRetries: -1})
		c.redis = cli
		c.closers = append(c.closers, cli.Close)
	case schemeRedlock:
		if err := e.noPath(); err != nil {
			return nil, err
		}
		if len(e.hosts) < 3 {
			return nil, usageErrorf("%s names %d nodes; Redlock needs at least 3 independent ones", e, len(e.hosts))
		}
		for _, h := range e.hosts {
			// One dial attempt: a dead node must not stall every call.
			cli := redis.NewClient(&redis.Options{Addr: h, Username: e.user, Password: e.password, DialTimeout: timeout, DialerRetries: 1, ContextTimeoutEnabled: true, MaxRetries: -1})
			c.nodes = append(c.nodes, cli)
			c.closers = append(c.closers, cli.Close)
		}
	case schemeEtcd:
		if err := e.noPath(); err != nil {
			return nil, err
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: e.hosts, Username: e.user, Password: e.password,
			DialTimeout: timeout, Logger: zap.NewNop(), Context: context.WithoutCancel(ctx),
		})
		if err != nil {
			return nil, unreachable(err)
		}
		c.etcd = cli
		c.closers = append(c.closers, cli.Close)
	case schemeZK:
		if err := e.noPath(); err != nil {
			return nil, err
		}
		zc, events, err := zk.Connect(e.hosts, timeout, zk.WithLogger(zkLogger{log}))
		if err != nil {
			return nil, unreachable(err)
		}
		c.zk = zc
		c.closers = append(c.closers, func() error { zc.Close(); return nil })
		if err := waitSession(ctx, events); err != nil {
			return nil, unreachable(err)
		}
		if e.user != "" || e.hasPass {
			if err := zc.AddAuth("digest", []byte(e.user+":"+e.password)); err != nil {
				return nil, fmt.Errorf("%s: digest auth: %w", e, err)
			}
		}
		return c, nil
	default:
		return nil, usageErrorf("%s: not a lock service; want %s", e, lockSchemes)
	}
	if err := c.ping(ctx); err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			// The server answered, with an error: wrong password, no
			// permission, a cluster that is down.
			return nil, withCode(exitSoftware, fmt.Errorf("%s: %w", e, err))
		}
		return nil, unreachable(err)
	}
	return c, nil
}

// ping checks that the service answers. Redlock needs a majority of its
// nodes.
func (c *conn) ping(ctx context.Context) error {
	switch {
	case c.redis != nil:
		return c.redis.Ping(ctx).Err()
	case c.nodes != nil:
		var errs []error
		for _, n := range c.nodes {
			if err := n.Ping(ctx).Err(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.Options().Addr, err))
			}
		}
		if len(errs) > len(c.nodes)/2 {
			return fmt.Errorf("%d of %d nodes answer, a majority is needed: %w", len(c.nodes)-len(errs), len(c.nodes), errors.Join(errs...))
		}
		return nil
	case c.etcd != nil:
		_, err := c.etcd.Get(ctx, "\x00fenceguard-ping", clientv3.WithCountOnly())
		return err
	}
	return nil
}

// waitSession waits for a ZooKeeper session.
func waitSession(ctx context.Context, events <-chan zk.Event) error {
	for {
		select {
		case ev := <-events:
			switch ev.State {
			case zk.StateHasSession:
				return nil
			case zk.StateAuthFailed:
				return errors.New("authentication failed")
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func tlsFor(hostport string) *tls.Config {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}

// lockOptions are what a locker is built with.
type lockOptions struct {
	prefix    string
	lockDelay time.Duration
	log       *slog.Logger
}

// locker builds the locker of the service. It owns nothing the conn does
// not: close the locker (the returned func), then the conn.
func (c *conn) locker(o lockOptions) (locks.Locker, func() error, error) {
	switch {
	case c.redis != nil:
		l, err := redislock.New(c.redis, redislock.Options{Prefix: o.prefix, LockDelay: o.lockDelay})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case c.nodes != nil:
		l, err := redlock.New(c.redlockNodes(), redlock.Options{Prefix: o.prefix, LockDelay: o.lockDelay})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case c.etcd != nil:
		l, err := etcdlock.New(c.etcd, etcdlock.Options{Prefix: o.prefix, LockDelay: o.lockDelay})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case c.zk != nil:
		// The locker keeps sessions of its own, one per TTL; the conn's
		// session only proved the ensemble reachable.
		var auth []zklock.Auth
		if c.ep.user != "" || c.ep.hasPass {
			auth = []zklock.Auth{{Scheme: "digest", Credentials: []byte(c.ep.user + ":" + c.ep.password)}}
		}
		l, err := zklock.New(c.ep.hosts, zklock.Options{Prefix: o.prefix, LockDelay: o.lockDelay, Auth: auth, Logger: zkLogger{o.log}})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	}
	return nil, nil, usageErrorf("%s: not a lock service", c.ep)
}

// redlockNodes are the Redlock nodes as the locker and sequencer take them.
func (c *conn) redlockNodes() []redlock.Client {
	nodes := make([]redlock.Client, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = n
	}
	return nodes
}

// sequencer returns the service's token.Sequencer over keys under prefix.
func (c *conn) sequencer(prefix string) token.Sequencer {
	switch {
	case c.redis != nil:
		return redislock.NewSequencer(c.redis, prefix)
	case c.nodes != nil:
		return redlock.NewSequencer(c.redlockNodes(), prefix)
	case c.etcd != nil:
		return etcdlock.NewSequencer(c.etcd, prefix)
	case c.zk != nil:
		return zklock.NewSequencer(c.zk, prefix)
	}
	return nil
}

// zkLogger sends go-zookeeper's chatter to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.log != nil {
		z.log.Debug("zookeeper: " + fmt.Sprintf(format, args...))
	}
}

// redisLogger sends go-redis's chatter to slog at debug level.
type redisLogger struct{ log *slog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, args ...any) {
	if r.log != nil {
		r.log.Debug("redis: " + fmt.Sprintf(format, args...))
	}
}

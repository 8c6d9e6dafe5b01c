// Package etcdembed runs a single-member etcd v3 server inside the calling
// process (go.etcd.io/etcd/server/v3/embed), on free loopback ports, with quiet
// logs. It is the zero-install lock service of the inventory demo, and the
// etcd 3.7 the integration tests run the etcd locker against next to the
// Debian etcd 3.4 binary the library's own tests use.
//
// [Start] returns once the server answers; [Server.Close] stops it, waits until
// every goroutine of the server has ended and removes the temporary data
// directory. Whoever calls Start must call Close. A Server is safe for
// concurrent use.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness"
)

// Options configures [Start]. The zero value is ready to use.
type Options struct {
	// Dir is the data directory, kept by Close and reused by the next Start.
	// Empty means a new temporary directory that Close removes.
	Dir string
	// NoFsync skips fsync: faster, but a crash of the machine may lose
	// acknowledged writes. Always on for a temporary directory, whose data
	// dies with the server anyway.
	NoFsync bool
	// Logger receives the server's logs. Nil means no logs at all.
	Logger *zap.Logger
}

// Server is a running in-process etcd server.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	tempDir   string // removed by Close; empty when the caller gave Dir

	closeOnce sync.Once
	closeErr  error
}

// Start starts the server and waits until it serves clients or ctx ends.
// Ports already taken between choosing and binding them are retried with new
// ones.
func Start(ctx context.Context, opts Options) (*Server, error) {
	dir, temp := opts.Dir, ""
	if dir == "" {
		var err error
		if temp, err = os.MkdirTemp("", "etcdembed-"); err != nil {
			return nil, fmt.Errorf("etcdembed: %w", err)
		}
		dir = temp
	}
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	var lastErr error
	for range 3 {
		s, err := start(ctx, dir, opts.NoFsync || temp != "", lg)
		if err == nil {
			s.tempDir = temp
			return s, nil
		}
		lastErr = err
		if !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			break
		}
	}
	if temp != "" {
		os.RemoveAll(temp)
	}
	return nil, lastErr
}

func start(ctx context.Context, dir string, noFsync bool, lg *zap.Logger) (*Server, error) {
	p, err := harness.FreePorts(2)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: %w", err)
	}
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(p[0])}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(p[1])}

	cfg := embed.NewConfig()
	cfg.Name = "etcdembed"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "etcdembed-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(p[1])
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = noFsync
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Server{etcd: e, endpoints: []string{client.Host}}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdembed: server failed while starting: %w", err)
	case <-e.Server.StopNotify():
		e.Close()
		return nil, errors.New("etcdembed: server stopped while starting")
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdembed: waiting for the server: %w", context.Cause(ctx))
	}
}

// Endpoints returns the client endpoints ("127.0.0.1:port") for clientv3.Config.
func (s *Server) Endpoints() []string {
	return append([]string(nil), s.endpoints...)
}

// Done is closed when the server has stopped, by Close or by a fatal error.
func (s *Server) Done() <-chan struct{} {
	return s.etcd.Server.StopNotify()
}

// Close stops the server, waits for all its goroutines and removes its
// temporary directory. It is idempotent; later calls return the first result.
// Clients still connected see their calls fail.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.etcd.Close() // blocks until every server goroutine has ended
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			s.closeErr = errors.New("etcdembed: server did not stop within 30s")
			return
		}
		if s.tempDir != "" {
			if err := os.RemoveAll(s.tempDir); err != nil {
				s.closeErr = fmt.Errorf("etcdembed: %w", err)
			}
		}
	})
	return s.closeErr
}

package servers

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/integration/servers/internal/ports"
)

// Proxy is an in-process TCP proxy (toxiproxy) in front of one server, so a
// test can cut, delay, slow or blackhole the connections of the clients it
// points at [Proxy.Addr] without touching the server or other clients. It
// works in front of any address, servers from the environment included.
//
// Faults apply to open connections and new ones alike, and stay until
// [Proxy.Restore]. Methods are safe for concurrent use.
//
// Restore never takes a fault off live connections: toxiproxy (v2.5) can
// hang removing a toxic from a link whose far end stopped reading — the
// toxic flushes its last chunk into a channel nobody drains, while holding
// the lock every new connection needs. Restore instead closes the faulty
// proxy's connections and starts a fresh proxy on the same address, so
// clients reconnect to a clean path.
type Proxy struct {
	mu    sync.Mutex // serializes fault changes
	api   *toxiproxy.ApiServer
	proxy *toxiproxy.Proxy
	dirty bool // the current proxy has had toxics
}

// NewProxy starts a proxy to upstream (host:port) for the calling test; it is
// closed when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := newProxy(upstream)
	if err != nil {
		t.Fatalf("servers: proxy to %s: %v", upstream, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// toxiproxyStubLeak tolerates a goroutine toxiproxy (v2.5) can leave behind:
// when a connection is torn down (Cut, Close) while a chunk is in flight,
// the link's writer exits on the write error and nobody reads the last
// toxic stub's output again, so the stub blocks on that send for good. It
// holds no server and no connection; every other goroutine is still checked.
var toxiproxyStubLeak = goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run")

func newProxy(upstream string) (*Proxy, error) {
	registry.mu.Lock()
	if !registry.toxiproxy {
		registry.toxiproxy = true
		registry.leakOpts = append(registry.leakOpts, toxiproxyStubLeak)
	}
	registry.mu.Unlock()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	var err error
	for range 3 {
		var pt []int
		if pt, err = ports.Pick(1); err != nil {
			return nil, err
		}
		listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(pt[0]))
		px := toxiproxy.NewProxy(api, "fg-"+strconv.Itoa(pt[0]), listen, upstream)
		if err = px.Start(); err == nil {
			return &Proxy{api: api, proxy: px}, nil
		}
		if !ports.InUse(err.Error()) {
			break
		}
	}
	return nil, err
}

// Addr returns the host:port clients connect to instead of the server's.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proxy.Listen
}

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.proxy.Upstream }

// Cut closes every connection through the proxy and refuses new ones:
// clients' calls fail at once (connection reset or refused).
func (p *Proxy) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop()
	return nil
}

// Restore removes every fault and accepts connections again, on the same
// address. Connections that went through a fault are closed (see [Proxy]);
// with no fault in place it changes nothing.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proxy.Enabled && !p.dirty {
		return nil
	}
	p.proxy.Stop()
	px := toxiproxy.NewProxy(p.api, p.proxy.Name, p.proxy.Listen, p.proxy.Upstream)
	if err := px.Start(); err != nil {
		return fmt.Errorf("servers: restoring proxy on %s: %w", p.proxy.Listen, err)
	}
	p.proxy, p.dirty = px, false
	return nil
}

// Delay holds back everything the server sends by d (a round trip takes d
// longer). It replaces an earlier Delay.
func (p *Proxy) Delay(d time.Duration) error {
	return p.toxic("latency", "downstream", fmt.Sprintf(`{"latency": %d}`, d.Milliseconds()))
}

// Slow limits what the server sends to about kbPerSec kilobytes per second.
// It replaces an earlier Slow.
func (p *Proxy) Slow(kbPerSec int64) error {
	return p.toxic("bandwidth", "downstream", fmt.Sprintf(`{"rate": %d}`, kbPerSec))
}

// Blackhole keeps connections open, and accepts new ones, but passes no data
// either way: clients' calls hang until their own timeouts.
func (p *Proxy) Blackhole() error {
	if err := p.toxic("timeout", "upstream", `{"timeout": 0}`); err != nil {
		return err
	}
	return p.toxic("timeout", "downstream", `{"timeout": 0}`)
}

// toxic adds (or replaces) the toxic named after its type and stream.
func (p *Proxy) toxic(typ, stream, attrs string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := typ + "_" + stream
	tc := p.proxy.Toxics
	p.dirty = true
	if tc.GetToxic(name) != nil { // updated in place; see Proxy on removal
		if _, err := tc.UpdateToxicJson(name, strings.NewReader(fmt.Sprintf(`{"toxicity": 1, "attributes": %s}`, attrs))); err != nil {
			return fmt.Errorf("servers: proxy: %s toxic: %w", typ, err)
		}
		return nil
	}
	js := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`, name, typ, stream, attrs)
	if _, err := tc.AddToxicJson(strings.NewReader(js)); err != nil {
		return fmt.Errorf("servers: proxy: %s toxic: %w", typ, err)
	}
	return nil
}

// Close closes all connections and stops listening.
// NewProxy's cleanup calls it; calling it again is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop() // closes every connection; toxics go with the proxy
	return nil
}

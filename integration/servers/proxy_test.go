package servers

import (
	"testing"
	"time"
)

func TestProxyFaults(t *testing.T) {
	t.Parallel()
	db := Redis(t)
	p := NewProxy(t, db.Addr)
	if p.Addr() == db.Addr || p.Upstream() != db.Addr {
		t.Fatalf("proxy %s → %s for server %s", p.Addr(), p.Upstream(), db.Addr)
	}
	c := redisClient(t, p.Addr())
	ping := func(d time.Duration) error {
		ctx, cancel := ctxFor(d)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	addr := p.Addr()

	// Cut: the open connection dies and new ones are refused.
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := ping(time.Second); err == nil {
		t.Fatal("PING through a cut proxy answered")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("proxy moved from %s to %s", addr, p.Addr())
	}
	eventually(t, 5*time.Second, "PING after Restore", func() error { return ping(time.Second) })

	// Blackhole: nothing comes back; calls time out.
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if err := ping(300 * time.Millisecond); err == nil {
		t.Fatal("PING through a blackhole answered")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "PING after Restore", func() error { return ping(time.Second) })

	// Delay: every answer comes late.
	if err := p.Delay(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := ping(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("PING with 200ms delay took %v", took)
	}
	if err := p.Delay(0); err != nil { // replaces, does not add up
		t.Fatal(err)
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := ping(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Logf("PING after Restore took %v (slow machine?)", took)
	}
}

package service

import (
	"strconv"
	"testing"
	"time"
)

func TestMarkCacheInternals(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newMarkCache(time.Second, func() time.Time { return now })
	c.learn("a", 100, c.epoch())
	if se := c.stale("a", 99); se == nil || se.Current != 100 || se.Presented != 99 || se.Resource != "sku:a" {
		t.Fatalf("99 below 100: %+v", se)
	}
	if se := c.stale("a", 100); se != nil {
		t.Fatalf("the equal token refused: %+v", se)
	}
	if se := c.stale("b", 1); se != nil {
		t.Fatalf("an unknown item refused: %+v", se)
	}
	now = now.Add(time.Second)
	if se := c.stale("a", 99); se != nil {
		t.Fatalf("refused after the TTL: %+v", se)
	}
	c.learn("a", 50, c.epoch()) // a lower answer replaces (the mark was reset)
	if se := c.stale("a", 60); se != nil {
		t.Fatalf("60 refused after the store said 50: %+v", se)
	}
	before := c.epoch()
	c.forget("a")
	if se := c.stale("a", 1); se != nil {
		t.Fatalf("refused after forget: %+v", se)
	}
	c.learn("a", 50, before) // asked for before the reset: dropped
	if se := c.stale("a", 1); se != nil {
		t.Fatalf("an answer asked for before forget was kept: %+v", se)
	}
	for i := range maxCachedMarks + 100 {
		c.learn(strconv.Itoa(i), 7, c.epoch())
	}
	if n := len(c.m); n > maxCachedMarks {
		t.Fatalf("%d entries, bound %d", n, maxCachedMarks)
	}
	if newMarkCache(-1, nil) != nil {
		t.Fatal("a negative TTL must mean no cache")
	}
	var off *markCache // every method is a no-op on nil
	off.learn("a", 1, off.epoch())
	off.forget("a")
	if off.stale("a", 1) != nil {
		t.Fatal("nil cache refused")
	}
}

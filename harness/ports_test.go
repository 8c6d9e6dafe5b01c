package harness

import (
	"net"
	"strconv"
	"testing"
)

func TestPickDistinctFreeNeverReused(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		ps, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if p < lowest || p >= ephemeralStart() {
				t.Errorf("port %d outside [%d, %d)", p, lowest, ephemeralStart())
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("picked port %d is not free: %v", p, err)
			}
			l.Close()
		}
	}
}

func TestInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if err == nil || !portInUse(err.Error()) {
		t.Fatalf("portInUse(%v) = false", err)
	}
	for _, s := range []string{
		"Could not create server TCP listening socket 127.0.0.1:6379: bind: Address already in use",
		`could not bind IPv4 address "127.0.0.1": Address already in use`,
		"java.net.BindException: Address already in use",
	} {
		if !portInUse(s) {
			t.Errorf("portInUse(%q) = false", s)
		}
	}
	if portInUse("connection refused") {
		t.Error(`portInUse("connection refused") = true`)
	}
}

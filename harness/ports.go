package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const (
	lowest  = 15000 // above the usual fixed service ports
	attempt = 200   // candidates tried per port before giving up
)

var (
	portsMu sync.Mutex
	issued  = map[int]bool{} // ports handed out by this process, guarded by portsMu
)

// FreePorts returns n distinct ports on 127.0.0.1 that were free a moment ago and
// that this process has not handed out before.
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	hi := ephemeralStart()
	out := make([]int, 0, n)
	for len(out) < n {
		p, err := pickOne(hi)
		if err != nil {
			return nil, err
		}
		issued[p] = true
		out = append(out, p)
	}
	return out, nil
}

func pickOne(hi int) (int, error) {
	if hi-lowest < 1000 {
		// Odd port-range configuration: let the kernel choose.
		for range attempt {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, fmt.Errorf("harness: %w", err)
			}
			p := l.Addr().(*net.TCPAddr).Port
			l.Close()
			if !issued[p] {
				return p, nil
			}
		}
		return 0, fmt.Errorf("harness: no free port found")
	}
	for range attempt {
		p := lowest + rand.IntN(hi-lowest)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("harness: no free port in [%d, %d) after %d tries", lowest, hi, attempt)
}

// ephemeralStart is the first port the kernel may give to outgoing connections.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				return v
			}
		}
	}
	return 32768 // Linux default; other systems use 49152 and up
}

// portInUse reports whether a server's log or error text says its port was taken:
// the wording of Redis, etcd, PostgreSQL and Java all contain this phrase.
func portInUse(text string) bool {
	return strings.Contains(strings.ToLower(text), "address already in use")
}

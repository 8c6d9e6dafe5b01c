package partition

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fenceguard/fenceguard/harness"
)

// A ZooKeeper member partitioned from its peers while its clients stay
// connected to it: the harness cuts clients off members (proxies), not
// members off each other, so this is done with the kernel's traffic control
// on the loopback device (htb, no action modules needed): packets of the
// member's quorum and election links go to a class shaped to 8 bit/s — a
// blackhole, at most one packet slips through — while its client port is
// untouched. Linux, root and tc are needed; the test skips without them.

var tcMu sync.Mutex // one partition at a time in this process

type zkPeers struct {
	quorum, election map[int]int // myid → port
}

func readPeers(t *testing.T, s *harness.Server) zkPeers {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(s.LogFile()), "zoo.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	p := zkPeers{quorum: map[int]int{}, election: map[int]int{}}
	re := regexp.MustCompile(`(?m)^server\.(\d+)=127\.0\.0\.1:(\d+):(\d+)`)
	for _, m := range re.FindAllStringSubmatch(string(cfg), -1) {
		id, _ := strconv.Atoi(m[1])
		p.quorum[id], _ = strconv.Atoi(m[2])
		p.election[id], _ = strconv.Atoi(m[3])
	}
	if len(p.quorum) == 0 {
		t.Fatalf("no server lines in %s's zoo.cfg", s.Name())
	}
	return p
}

func tc(args ...string) error {
	out, err := exec.Command("tc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// isolateZK partitions member (myid id, process pid) from the other members
// of the ensemble described by peers, leaving client traffic alone, until
// the returned heal is called (also at cleanup).
func isolateZK(t *testing.T, peers zkPeers, id, pid int) (heal func()) {
	t.Helper()
	harness.ShapeLoopback(t) // tc and root, and lo to ourselves across packages
	tcMu.Lock()
	if err := tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "0", "r2q", "1"); err != nil {
		tcMu.Unlock()
		t.Fatalf("cannot shape loopback traffic: %v", err)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			if err := tc("qdisc", "del", "dev", "lo", "root"); err != nil {
				t.Errorf("removing the partition: %v", err)
			}
			tcMu.Unlock()
		})
	}
	t.Cleanup(heal)
	must := func(args ...string) {
		if err := tc(args...); err != nil {
			heal()
			t.Fatal(err)
		}
	}
	must("class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "8bit", "ceil", "8bit", "burst", "1b", "cburst", "1b", "quantum", "1500")
	filter := func(dir string, port int, extra ...string) {
		args := []string{"filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
			"match", "ip", dir, strconv.Itoa(port), "0xffff"}
		args = append(args, extra...)
		must(append(args, "flowid", "1:10")...)
	}
	// The member's own listeners, both ways.
	own := []int{peers.quorum[id], peers.election[id]}
	others := map[int]bool{}
	for sid := range peers.quorum {
		if sid != id {
			others[peers.quorum[sid]] = true
			others[peers.election[sid]] = true
		}
	}
	// Its established links to the others' listeners, by its local port.
	out, err := exec.Command("ss", "-tnpH", "state", "established").Output()
	if err != nil {
		heal()
		t.Fatalf("ss: %v", err)
	}
	pidRe := regexp.MustCompile(`pid=` + strconv.Itoa(pid) + `,`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	links := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !pidRe.MatchString(sc.Text()) {
			continue
		}
		// 127.0.0.1:P or [::ffff:127.0.0.1]:P (Java's v4-mapped sockets
		// send IPv4 packets all the same).
		l, _ := strconv.Atoi(f[2][strings.LastIndexByte(f[2], ':')+1:])
		r, _ := strconv.Atoi(f[3][strings.LastIndexByte(f[3], ':')+1:])
		if others[r] {
			own = append(own, l)
			links++
		}
	}
	if links == 0 {
		heal()
		t.Fatalf("found no link of member %d (pid %d) to its peers in ss output", id, pid)
	}
	for _, p := range own {
		filter("dport", p)
		filter("sport", p)
	}
	// New connections to the others' peer ports (a reconnect, an
	// election): their SYNs.
	for p := range others {
		filter("dport", p, "match", "ip", "protocol", "6", "0xff", "match", "u8", "0x02", "0x02", "at", "33")
	}
	t.Logf("partitioned member %d from its peers (%d peer links, ports %v)", id, links, own)
	return heal
}

package lockbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Probe reads the state a soak reports at its start and its end: named
// figures, each reported as a metric "<name>-start" and "<name>-end".
type Probe func(ctx context.Context) (map[string]float64, error)

// soakWarm is how many cycles SoakKeys runs, uncounted, before the start.
const soakWarm = 100

// SoakKeys is [Soak] with the state around it. It first runs cycle for
// i = -1 … -100, uncounted (connections, scripts, the servers' code paths),
// then every probe, the b.N cycles of Soak, and every probe again, and
// reports the probes' figures. cycle gets the cycle's number: give each a
// key of its own (see [DistinctKey]) for the distinct-keys soak.
func SoakKeys(b *testing.B, cycle func(ctx context.Context, i int) error, probes []Probe, servers ...int) {
	for i := -1; i >= -soakWarm; i-- {
		if err := cycle(context.Background(), i); err != nil {
			b.Fatalf("warm-up cycle %d: %v", i, err)
		}
	}
	start := sample(b, probes)
	Soak(b, cycle, servers...)
	end := sample(b, probes)
	runtime.KeepAlive(cycle) // and what it holds: the Locker's state is measured
	names := make([]string, 0, len(start))
	for name := range start {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b.ReportMetric(start[name], name+"-start")
		b.ReportMetric(end[name], name+"-end")
	}
}

func sample(b *testing.B, probes []Probe) map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := map[string]float64{}
	for _, p := range probes {
		m, err := p(ctx)
		if err != nil {
			b.Fatalf("lockbench: state probe: %v", err)
		}
		for k, v := range m {
			all[k] = v
		}
	}
	return all
}

// DistinctKey is the lock key of the distinct-keys soak's cycle i.
func DistinctKey(i int) string { return "d" + strconv.Itoa(i) }

// Client reports this process's heap after a collection (heap-MiB: the
// live heap of the Lockers, the fences and the benchmark) and its
// goroutines.
func Client(context.Context) (map[string]float64, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return map[string]float64{
		"heap-MiB":   float64(ms.HeapAlloc) / (1 << 20),
		"goroutines": float64(runtime.NumGoroutine()),
	}, nil
}

// Redis reports the nodes' used_memory (summed, redis-MiB) and key count
// (DBSIZE, summed, redis-keys), and for each label the keys matching its
// prefix on all nodes (<label>-keys), counted with SCAN.
func Redis(nodes []*redis.Client, prefixes map[string]string) Probe {
	return func(ctx context.Context) (map[string]float64, error) {
		m := map[string]float64{"redis-MiB": 0, "redis-keys": 0}
		for label := range prefixes {
			m[label+"-keys"] = 0
		}
		for _, c := range nodes {
			info, err := c.Info(ctx, "memory").Result()
			if err != nil {
				return nil, err
			}
			used, err := infoField(info, "used_memory")
			if err != nil {
				return nil, err
			}
			m["redis-MiB"] += used / (1 << 20)
			n, err := c.DBSize(ctx).Result()
			if err != nil {
				return nil, err
			}
			m["redis-keys"] += float64(n)
			for label, prefix := range prefixes {
				n, err := CountKeys(ctx, c, prefix)
				if err != nil {
					return nil, err
				}
				m[label+"-keys"] += float64(n)
			}
		}
		return m, nil
	}
}

func infoField(info, field string) (float64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}

// CountKeys counts the keys that start with prefix.
func CountKeys(ctx context.Context, c *redis.Client, prefix string) (int, error) {
	n := 0
	it := c.Scan(ctx, 0, globEscape(prefix)+"*", 10_000).Iterator()
	for it.Next(ctx) {
		n++
	}
	return n, it.Err()
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ZooKeeper reports the server's znode count (mntr's zk_znode_count:
// znodes) and the children of root (key-znodes: one per key the locker
// keeps a znode for), read through c.
func ZooKeeper(addr string, c *zk.Conn, root string) Probe {
	return func(ctx context.Context) (map[string]float64, error) {
		n, err := ZNodeCount(ctx, addr)
		if err != nil {
			return nil, err
		}
		_, st, err := c.Exists(root)
		if err != nil {
			return nil, err
		}
		kids := 0.0
		if st != nil {
			kids = float64(st.NumChildren)
		}
		return map[string]float64{"znodes": float64(n), "key-znodes": kids}, nil
	}
}

// ZNodeCount is the server's znode count, from the mntr four-letter word
// (which the server must allow: 4lw.commands.whitelist).
func ZNodeCount(ctx context.Context, addr string) (int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "mntr"); err != nil {
		return 0, err
	}
	out, err := io.ReadAll(io.LimitReader(conn, 1<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "zk_znode_count"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("mntr on %s has no zk_znode_count: %q", addr, strings.TrimSpace(string(out)))
}

// Postgres reports a table's rows (pg-rows) and its size with indexes and
// TOAST (pg_total_relation_size, pg-KiB).
func Postgres(pool *pgxpool.Pool, table string) Probe {
	return func(ctx context.Context) (map[string]float64, error) {
		id := pgx.Identifier{table}.Sanitize()
		var rows, size int64
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+id+`), pg_total_relation_size($1::regclass)`, id).Scan(&rows, &size); err != nil {
			return nil, err
		}
		return map[string]float64{"pg-rows": float64(rows), "pg-KiB": float64(size) / 1024}, nil
	}
}

// ServerRSS reports the resident memory of the server processes, summed
// (srv-RSS-MiB; Linux, from /proc; 0s are skipped).
func ServerRSS(pids ...int) Probe {
	return func(context.Context) (map[string]float64, error) {
		var kib float64
		for _, pid := range pids {
			if pid == 0 {
				continue
			}
			raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			if err != nil {
				return nil, err
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					n, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
					if err != nil {
						return nil, err
					}
					kib += n
				}
			}
		}
		return map[string]float64{"srv-RSS-MiB": kib / 1024}, nil
	}
}

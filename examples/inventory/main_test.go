package main

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/child"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
)

// mainEnv makes the test binary run as the inventory command, so the tests
// drive the real wiring — and the demo's workers, which re-execute the
// binary, run it too.
const mainEnv = "FENCEGUARD_INVENTORY_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	harness.Main(m)
}

func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	child.Prepare(cmd, false)
	return cmd
}

// databases are the stores the demo and serve are tested on, each in
// parallel with the others.
var databases = []struct {
	name    string
	printed []string                    // how the demo may name the server
	url     func(t *testing.T) string   // a fresh database's URL, as a user gives it
	demo    func(t *testing.T) []string // the demo's flags for a fresh database
}{
	{"PostgreSQL", []string{"PostgreSQL"},
		func(t *testing.T) string { return pgserver.Shared(t).DSN },
		func(t *testing.T) []string { return []string{"--database-url=" + pgserver.Shared(t).DSN} }},
	// The harness's MariaDB, or the MySQL FENCEGUARD_MYSQL_DSN names: a
	// mysql:// URL, and for the demo go-sql-driver/mysql's DSN.
	{"MySQL", []string{"MariaDB", "MySQL"},
		mysqlURL,
		func(t *testing.T) []string {
			return []string{"--store=mysql", "--database-url=" + mysqlserver.Shared(t).DSN}
		}},
}

// mysqlURL returns a mysql:// URL of a fresh database on the harness's
// MariaDB (or the MySQL of FENCEGUARD_MYSQL_DSN).
func mysqlURL(t *testing.T) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(mysqlserver.Shared(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + cfg.DBName}).String()
}

// The demo end to end, as a newcomer runs it but shorter: embedded etcd,
// PostgreSQL and MariaDB (from the harness, through DATABASE_URL's flag),
// worker processes, the table, the counters, the timeline, exit status 0.
func TestDemoCommand(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			demoCommand(t, d.printed, d.demo(t))
		})
	}
}

func demoCommand(t *testing.T, printed, storeFlags []string) {
	svg := filepath.Join(t.TempDir(), "timeline.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := command(ctx, append([]string{"demo", "--workers=3", "--stock=8", "--ttl=2s", "--pause=2.2s", "--work=20ms",
		"--timeline=" + svg}, storeFlags...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	text := string(out)
	if !slices.ContainsFunc(printed, func(name string) bool { return strings.Contains(text, "store         "+name+" ") }) {
		t.Errorf("output names none of %q as the store:\n%s", printed, text)
	}
	for _, want := range []string{
		"etcd 3.7, embedded", "column-mode enforcer",
		"frozen with SIGSTOP", "ACCEPTED, undoing", "REFUSED, 409 stale-token",
		"units oversold", "fenceguard_claims_total", "without fencing:", "with fencing: nothing oversold",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	f, err := os.Open(svg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("timeline: %v", err)
		}
	}
}

// serve answers, then shuts down gracefully on SIGTERM with exit status 0.
func TestServeCommand(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := command(ctx, "serve", "--store=memory", "--addr="+addr)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("serve did not answer /healthz: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	req, _ := http.NewRequest("PUT", "http://"+addr+"/admin/items/lamp", strings.NewReader(`{"stock":2}`))
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin put: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// serve wires the forged-token checks on the memory store too: the
	// largest token there is would lock the item out.
	req, _ = http.NewRequest("PUT", "http://"+addr+"/items/lamp/stock", strings.NewReader(`{"stock":0}`))
	req.Header.Set("X-Fencing-Token", "18446744073709551615")
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 403 {
		t.Fatalf("PUT under 2^64-1: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logs.String())
	}
	for _, want := range []string{"serving", "shutting down"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	err := command(context.Background(), "sell").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("unknown command: %v, want exit status 2", err)
	}
}

// The load command, briefly (docs/load.md has a real run): it runs, both
// ways, and the fenced service answers no 5xx.
func TestLoadCommand(t *testing.T) {
	pg := pgserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := command(ctx, "load", "-duration=1s", "-control=1s", "-clients=2", "-items=4", "-database-url="+pg.DSN).CombinedOutput()
	if err != nil {
		t.Fatalf("load: %v\n%s", err, out)
	}
	for _, want := range []string{"fencing ON", "fencing OFF", "5xx             0", "fence_tokens    start 0 rows, end 0 rows", "throughput fenced / unfenced"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%s", out)
}

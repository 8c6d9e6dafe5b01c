package postgres_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// startStandby makes a hot standby of primary (pg_basebackup with -R)
// and starts it on a free port; it is stopped when the test ends.
func startStandby(t *testing.T, primary *harness.Server) (dsn string, exited <-chan struct{}) {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_basebackup")
	if len(bins) == 0 {
		if os.Getenv(harness.EnvRequireServers) == "1" {
			t.Fatal("no pg_basebackup in /usr/lib/postgresql/*/bin")
		}
		t.Skip("no pg_basebackup in /usr/lib/postgresql/*/bin: install the Debian package postgresql")
	}
	bin := filepath.Dir(bins[len(bins)-1])
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "fg-standby-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	host, port, _ := net.SplitHostPort(primary.Addr())
	backup := osexec.Command(filepath.Join(bin, "pg_basebackup"), "-h", host, "-p", port, "-U", "postgres",
		"-D", data, "-R", "-X", "stream", "--no-sync", "--checkpoint=fast")
	backup.Dir = "/"
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	standbyPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	logFile, err := os.Create(filepath.Join(dir, "standby.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("standby log:\n%s", b)
		}
	})
	srv := osexec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", standbyPort, "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "hot_standby=on", "-c", "fsync=off",
		"-c", "max_connections=200") // not below the primary's (the harness's)
	srv.Dir = "/"
	srv.Stdout, srv.Stderr = logFile, logFile
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
	})
	return "postgres://postgres@127.0.0.1:" + standbyPort + "/postgres?sslmode=disable", done
}

// eventually retries f until it succeeds or a minute has passed.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every acceptance, an equal token included, is a conditional write on
// the server: through a connection to a hot standby — which serves the
// marks, replicated, to reads — every path fails with the server's
// read-only error instead of accepting the token the mark already holds.
func TestHotStandbyFailsClosed(t *testing.T) {
	primary := pgserver.New(t)
	ctx := ctxFor(t, 2*time.Minute)
	pp, err := pgxpool.New(ctx, pgserver.DSN(primary))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pp.Close)
	if err := postgres.Migrate(ctx, pp); err != nil {
		t.Fatal(err)
	}
	exec(t, pp, `CREATE TABLE items (id bigint PRIMARY KEY, stock int NOT NULL DEFAULT 0, note text, fence_token bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO items (id, stock) VALUES (1, 10)`)
	items := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id"})
	if err := items.Update(ctx, pp, 1, 5, postgres.Set("stock", 9)); err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewFence(pp).Claim(ctx, "sku:1", 5); err != nil {
		t.Fatal(err)
	}
	standby, exited := startStandby(t, primary)
	var sp *pgxpool.Pool
	eventually(t, "connecting to the standby", func() error {
		select {
		case <-exited:
			t.Fatal("the standby exited")
		default:
		}
		p, err := pgxpool.New(ctx, standby)
		if err == nil {
			if err = p.Ping(ctx); err != nil {
				p.Close()
			}
		}
		sp = p
		return err
	})
	t.Cleanup(sp.Close)
	eventually(t, "the standby replaying the marks", func() error {
		var recovering bool
		var mark, hw int64
		err := sp.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT fence_token FROM items WHERE id = 1),
 (SELECT token FROM fence_tokens WHERE resource = 'sku:1')`).Scan(&recovering, &mark, &hw)
		if err == nil && (!recovering || mark != 5 || hw != 5) {
			err = fmt.Errorf("in recovery %v, marks %d and %d", recovering, mark, hw)
		}
		return err
	})
	lazy, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: true})
	if err != nil {
		t.Fatal(err)
	}
	var stock int
	fnRan := false
	fn := func(tx pgx.Tx) error {
		fnRan = true
		return tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&stock)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Read, the equal token", func() error { return items.Read(ctx, sp, 1, 5, []string{"stock"}, &stock) }},
		{"Read, a higher token", func() error { return items.Read(ctx, sp, 1, 6, []string{"stock"}, &stock) }},
		{"Update, the equal token", func() error { return items.Update(ctx, sp, 1, 5, postgres.Set("stock", 0)) }},
		{"Upsert, the equal token", func() error { return items.Upsert(ctx, sp, 1, 5, postgres.Set("stock", 0)) }},
		{"Delete, the equal token", func() error { return items.Delete(ctx, sp, 1, 5) }},
		{"Tx, the equal token", func() error { return postgres.Tx(ctx, sp, "sku:1", 5, fn) }},
		{"Tx claiming with the first statement, the equal token", func() error { return lazy.Tx(ctx, sp, "sku:1", 5, fn) }},
		{"Fence, the equal token", func() error { return postgres.NewFence(sp).Claim(ctx, "sku:1", 5) }},
		{"Fence, a higher token", func() error { return postgres.NewFence(sp).Claim(ctx, "sku:1", 6) }},
		{"Fence.Reset", func() error {
			_, err := postgres.NewFence(sp).Reset(ctx, "sku:1", 7)
			return err
		}},
		{"Table.Reset", func() error {
			_, err := newTable(t, postgres.TableOptions{Name: pgx.Identifier{"items"}, Key: "id", Logger: discard}).Reset(ctx, sp, 1, 7)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stock, fnRan = -1, false
			err := c.call()
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
				t.Fatalf("on a hot standby: %v, want the read-only error", err)
			}
			if errors.Is(err, token.ErrStale) || errors.Is(err, postgres.ErrNoRow) {
				t.Fatalf("on a hot standby: %v, want only the read-only error", err)
			}
			if fnRan && stock != -1 {
				t.Fatal("fn read under a claim the standby cannot have made")
			}
		})
	}
}

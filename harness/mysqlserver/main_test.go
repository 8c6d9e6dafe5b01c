package mysqlserver

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

func TestMain(m *testing.M) {
	if os.Getenv(programChildEnv) != "" {
		// TestStartChild is a program: no harness.Main.
		os.Exit(m.Run())
	}
	harness.Main(m)
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// conn opens a pool on dsn, closed when the test ends.
func conn(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// queryValue returns the one value of q's one row, as text.
func queryValue(ctx context.Context, db *sql.DB, q string, args ...any) (string, error) {
	var v sql.NullString
	if err := db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		return "", err
	}
	return v.String, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	harness.Eventually(t, d, func() error {
		if err := cond(); err != nil {
			return errors.New(what + ": " + err.Error())
		}
		return nil
	})
}

func requireInstall(t *testing.T) {
	t.Helper()
	if _, ok := newKind(); !ok {
		harness.SkipOrFail(t, harness.NoBinaryMessage("mysqlserver.New", "MariaDB (mariadb-install-db, mariadbd)", debPkg))
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"root@tcp(127.0.0.1:3306)/":                             "root@tcp(127.0.0.1:3306)/fg_x",
		"u:p@tcp(h:5)/other?parseTime=true":                     "u:p@tcp(h:5)/fg_x?parseTime=true",
		"u@unix(/run/mysqld/mysqld.sock)/?clientFoundRows=true": "u@unix(/run/mysqld/mysqld.sock)/fg_x?clientFoundRows=true",
	} {
		if got, err := withDatabase(in, "fg_x"); err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := withDatabase("not a dsn", "fg_x"); err == nil {
		t.Error("withDatabase of a malformed DSN: no error")
	}
}

package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/harness"
)

func TestMain(m *testing.M) {
	if os.Getenv(programChildEnv) != "" {
		// TestStartChild is a program: no harness.Main.
		os.Exit(m.Run())
	}
	harness.Main(m)
}

func pgConnect(ctx context.Context, dsn string) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }

func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// queryValue returns the one value of q's one row, as text.
func queryValue(ctx context.Context, c *pgx.Conn, q string) (string, error) {
	var v any
	if err := c.QueryRow(ctx, q).Scan(&v); err != nil {
		return "", err
	}
	return fmt.Sprint(v), nil
}

// execSQL runs statements with the simple protocol.
func execSQL(ctx context.Context, c *pgx.Conn, sql string) error {
	_, err := c.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
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

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:5/postgres?sslmode=disable": "postgres://u@h:5/fg_x?sslmode=disable",
		"postgresql://u@h:5":                        "postgresql://u@h:5/fg_x",
		"host=h port=5 dbname=postgres":             "host=h port=5 dbname=postgres dbname=fg_x",
	} {
		if got := withDatabase(in, "fg_x"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

// sharedAdmin is the admin DSN of the shared server, started already.
func sharedAdmin() string {
	sh, _, _ := shared.Load(startShared)
	return sh.admin
}

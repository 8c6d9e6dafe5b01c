package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) {
	mysqlserver.ExamplesNeed()
	harness.Main(m)
}

// discard is a logger for tests that do not look at the audit records.
var discard = slog.New(slog.DiscardHandler)

// ctxFor returns a context that ends with the test or after d.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newDB opens a pool on a fresh database of the test's own; params are
// DSN parameters of go-sql-driver/mysql (name, value, …).
func newDB(t testing.TB, params ...string) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(mysqlserver.Shared(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(params); i += 2 {
		switch params[i] {
		case "clientFoundRows":
			cfg.ClientFoundRows = params[i+1] == "true"
		case "interpolateParams":
			cfg.InterpolateParams = params[i+1] == "true"
		case "innodb_snapshot_isolation": // MariaDB's, ON or OFF
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[params[i]] = params[i+1]
		case "sql_mode": // the session's sql_mode, e.g. "" for no strict mode
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params["sql_mode"] = "'" + params[i+1] + "'"
		case "isolation": // the session's isolation level, e.g. READ-COMMITTED
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[isolationVar(t, cfg)] = "'" + params[i+1] + "'"
		default:
			t.Fatalf("newDB: unknown parameter %s", params[i])
		}
	}
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() { db.Close() })
	return db
}

// isolationVar is the name of the session's isolation level variable:
// tx_isolation on MariaDB (before 11.1), transaction_isolation on MySQL
// (since 5.7.20; 8.0 has only that one).
func isolationVar(t testing.TB, cfg *gomysql.Config) string {
	t.Helper()
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var v string
	if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, "MariaDB") {
		return "tx_isolation"
	}
	return "transaction_isolation"
}

// exec runs statements, failing the test on the first error.
func exec(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// stale checks that err is a StaleError for presented with current as
// the mark.
func stale(t testing.TB, err error, presented, current token.Token) {
	t.Helper()
	var se *token.StaleError
	if !errors.As(err, &se) || !errors.Is(err, token.ErrStale) {
		t.Fatalf("claim with %d = %v, want a StaleError", presented, err)
	}
	if se.Presented != presented || se.Current != current {
		t.Fatalf("StaleError %+v, want presented %d, current %d", se, presented, current)
	}
}

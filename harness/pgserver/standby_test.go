package pgserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A standby serves what the primary wrote, refuses writes, and is a server
// with the usual faults.
func TestStandbyReplicates(t *testing.T) {
	t.Parallel()
	primary := New(t)
	p := pgConn(t, DSN(primary))
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	if err := execSQL(ctx, p, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	standby := NewStandby(t, primary)
	if DSN(standby) == "" || standby.Addr() == primary.Addr() {
		t.Fatalf("standby at %q, DSN %q", standby.Addr(), DSN(standby))
	}
	s := pgConn(t, DSN(standby))
	if v, err := queryValue(ctx, s, "SELECT pg_is_in_recovery()"); err != nil || v != "true" {
		t.Fatalf("pg_is_in_recovery() = %s, %v; want true", v, err)
	}
	if err := execSQL(ctx, p, "INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the standby replays the insert", func() error {
		v, err := queryValue(ctx, s, "SELECT count(*) FROM kept")
		if err == nil && v != "2" {
			err = errors.New("count " + v)
		}
		return err
	})
	var pe *pgconn.PgError
	if err := execSQL(ctx, s, "INSERT INTO kept VALUES (3)"); !errors.As(err, &pe) || pe.Code != "25006" { // read_only_sql_transaction
		t.Fatalf("INSERT on the standby: %v, want SQLSTATE 25006", err)
	}
	if err := standby.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(false); err != nil {
		t.Fatal(err)
	}
	s2 := pgConn(t, DSN(standby))
	if v, err := queryValue(context.Background(), s2, "SELECT count(*) FROM kept"); err != nil || v != "2" {
		t.Fatalf("after Kill and Start: count = %s, %v; want 2", v, err)
	}
}

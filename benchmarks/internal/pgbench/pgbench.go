// Package pgbench gives the many-keys benchmarks their PostgreSQL side: a
// pool on the harness's server and tables of lockbench.Keys rows, one per
// locker, updated fenced (column mode) or plain.
package pgbench

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/benchmarks/internal/lockbench"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// Pool returns a pool of lockbench.Workers connections (so that no cycle
// waits for one) to a fresh database on the harness's PostgreSQL, with
// fence_tokens migrated, and the server's process id (0 when the harness
// did not start it).
func Pool(b *testing.B) (*pgxpool.Pool, int) {
	pg := pgserver.Shared(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = lockbench.Workers, lockbench.Workers
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		b.Fatal(err)
	}
	b.Logf("postgres: fsync=%s synchronous_commit=%s", fsync, syncCommit)
	if err := postgres.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	pid := 0
	if pg.Server != nil {
		pid = pg.Server.PID()
	}
	return pool, pid
}

// Rows is one table of lockbench.Keys rows (id 0 … Keys-1, a counter n,
// fence_token), for one locker: tokens of different lockers are not
// comparable, so lockers never share a table.
type Rows struct {
	pool  *pgxpool.Pool
	name  string
	plain string
	table *postgres.Table
}

// NewRows creates the table name.
func NewRows(b *testing.B, pool *pgxpool.Pool, name string) *Rows {
	ctx := context.Background()
	id := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{
		`CREATE TABLE ` + id + ` (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)`,
		fmt.Sprintf(`INSERT INTO %s (id) SELECT generate_series(0, %d)`, id, lockbench.Keys-1),
		`VACUUM ANALYZE ` + id,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{name}, Key: "id"})
	if err != nil {
		b.Fatal(err)
	}
	return &Rows{pool: pool, name: name, table: tb, plain: `UPDATE ` + id + ` SET n = n + 1 WHERE id = $1`}
}

// Fenced adds one to key's counter in column mode under t: Table.Update
// with Add, one statement.
func (r *Rows) Fenced(ctx context.Context, key int, t token.Token) error {
	return r.table.Update(ctx, r.pool, int64(key), t, postgres.Add("n", 1))
}

// Plain adds one to key's counter with a plain UPDATE, unfenced.
func (r *Rows) Plain(ctx context.Context, key int) error {
	tag, err := r.pool.Exec(ctx, r.plain, int64(key))
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("%s: row %d: %d rows updated", r.name, key, tag.RowsAffected())
	}
	return err
}

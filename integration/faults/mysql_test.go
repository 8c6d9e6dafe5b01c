package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/harness/mysqlserver"
	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/storage/mysql"
	"github.com/fenceguard/fenceguard/token"
)

// MySQL tables of each copy of mysql-column and mysql-tx, in the cell's
// own database on the package's MariaDB server.
var myTables = map[string]string{
	myColumn:             "col_on",
	myColumn + offSuffix: "col_off",
	myTx:                 "tx_on",
	myTx + offSuffix:     "tx_off",
}

// myTxTokens is mysql-tx's high-water table.
var myTxTokens = []string{"tx_tokens"}

// mySchema is the MySQL side of the cell's resources: a table per copy,
// all alike (fence_token is column mode's mark, last_token the token a
// control's write carried), and the resource's own log, which MariaDB
// keeps: every table, mysql-tx's high-water table too, is
// system-versioned by transaction (MariaDB's WITH SYSTEM VERSIONING), so
// each transaction that changed a row left the row's old version behind,
// stamped with the transaction, and mysql.transaction_registry gives the
// transactions' commit order — the order in which the table accepted the
// accesses to the row, which wait for each other on its lock. Not
// triggers, as in PostgreSQL: a row trigger on the guarded table or the
// high-water table hides from storage/mysql the outcome its statements
// report through LAST_INSERT_ID(expr) (MariaDB 10.11 sends 0 in the OK
// packet once a trigger ran), and a Tx would then run its function on a
// stale claim.
func mySchema() []string {
	var stmts []string
	for _, name := range sortedValues(myTables) {
		stmts = append(stmts, `CREATE TABLE `+name+` (id VARCHAR(64) NOT NULL PRIMARY KEY, stock INT NOT NULL, val VARCHAR(255) NOT NULL,
	fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0, last_token BIGINT UNSIGNED NOT NULL DEFAULT 0, `+myVersionColumns+`)
	ENGINE=InnoDB WITH SYSTEM VERSIONING`)
	}
	return stmts
}

// myVersionColumns make a table system-versioned by transaction: rs and
// re are the ids of the transactions that made a version and replaced it.
const myVersionColumns = `rs BIGINT UNSIGNED GENERATED ALWAYS AS ROW START INVISIBLE,
	re BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE,
	PERIOD FOR SYSTEM_TIME(rs, re)`

// myVersion is one version of a row, as the log reads it.
type myVersion struct {
	id                    string
	stock                 int
	val                   string
	fenceToken, lastToken uint64
	commit                uint64 // the commit order of the transaction that made it
	at                    time.Time
}

// myResource is the MySQL side of a cell's resource service: its own
// database on the package's shared MariaDB server.
type myResource struct {
	db  *sql.DB
	dsn string // for the clients
}

func newMyResource(t *testing.T) *myResource {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := myDSN(mysqlserver.Shared(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(8)
	var version string
	if err := db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Fatalf("the MySQL copies keep their log with MariaDB's system versioning; %s is %s", mysqlserver.EnvDSN, version)
	}
	for _, q := range mySchema() {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("mysql schema: %v\n%s", err, q)
		}
	}
	tokens, err := mysql.NewTokens(mysql.TokensOptions{Name: myTxTokens})
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	q := `ALTER TABLE ` + myTxTokens[0] + ` ADD COLUMN rs BIGINT UNSIGNED GENERATED ALWAYS AS ROW START INVISIBLE,
	ADD COLUMN re BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE,
	ADD PERIOD FOR SYSTEM_TIME(rs, re), ADD SYSTEM VERSIONING`
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("mysql schema: %v\n%s", err, q)
	}
	return &myResource{db: db, dsn: dsn}
}

// myDSN is dsn as the suite connects with it: a plain UPDATE reports the
// rows it matched (clientFoundRows), so a control's write tells "no such
// item" from "nothing changed"; parameters are interpolated, one round
// trip a statement. storage/mysql works either way.
func myDSN(dsn string) (string, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.ClientFoundRows, cfg.InterpolateParams = true, true
	cfg.Timeout = 10 * time.Second
	return cfg.FormatDSN(), nil
}

// openMy opens a client's pool on the cell's MySQL database.
func openMy(dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return db, nil
}

// seed creates items in every MySQL copy.
func (m *myResource) seed(ctx context.Context, items []string, stock int, val string) error {
	for _, tbl := range sortedValues(myTables) {
		q := `INSERT INTO ` + tbl + ` (id, stock, val) VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(items)), ", ")
		var args []any
		for _, it := range items {
			args = append(args, it, stock, val)
		}
		if _, err := m.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("seeding %s: %w", tbl, err)
		}
	}
	return nil
}

// collect adds, for every MySQL copy of every item, the final state and
// the resource's log to states and logs (keys: copy, then item). The log
// is the row's versions after the seeded one, in commit order: a version
// that changed the stock or the value is a write, one that only moved
// fence_token or last_token a read; a version equal to the one before
// (a statement that matched the row and changed nothing: a refused claim
// or write) is no access. mysql-tx's claims are the versions of the
// item's row in its high-water table, its first included, each logged
// before the statements of its own transaction.
func (m *myResource) collect(ctx context.Context, items []string, states map[string]map[string]history.State, logs map[string]map[string][]history.Accepted) error {
	args := make([]any, len(items))
	for i, it := range items {
		args[i] = it
	}
	in := `(` + strings.TrimSuffix(strings.Repeat("?, ", len(items)), ", ") + `)`
	versions := func(q string) (map[string][]myVersion, error) {
		rows, err := m.db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string][]myVersion{}
		for rows.Next() {
			var v myVersion
			var at int64
			if err := rows.Scan(&v.id, &v.stock, &v.val, &v.fenceToken, &v.lastToken, &v.commit, &at); err != nil {
				return nil, err
			}
			v.at = time.UnixMicro(at)
			out[v.id] = append(out[v.id], v)
		}
		return out, rows.Err()
	}
	const registry = ` JOIN mysql.transaction_registry r ON r.transaction_id = v.rs`
	const commit = `, r.commit_id, CAST(UNIX_TIMESTAMP(r.commit_timestamp) * 1000000 AS SIGNED)`
	claims, err := versions(`SELECT CONVERT(v.resource USING utf8mb4), 0, '', v.token, 0` + commit +
		` FROM ` + myTxTokens[0] + ` FOR SYSTEM_TIME ALL AS v` + registry + ` WHERE v.resource IN ` + in + ` ORDER BY r.commit_id`)
	if err != nil {
		return fmt.Errorf("reading %s's versions: %w", myTxTokens[0], err)
	}
	for cp, tbl := range myTables {
		vs, err := versions(`SELECT v.id, v.stock, v.val, v.fence_token, v.last_token` + commit +
			` FROM ` + tbl + ` FOR SYSTEM_TIME ALL AS v` + registry + ` WHERE v.id IN ` + in + ` ORDER BY r.commit_id`)
		if err != nil {
			return fmt.Errorf("reading %s's versions: %w", tbl, err)
		}
		states[cp], logs[cp] = map[string]history.State{}, map[string][]history.Accepted{}
		for id, rows := range vs {
			last := rows[len(rows)-1]
			states[cp][id] = history.State{Stock: last.stock, Val: last.val}
			var log []history.Accepted
			mark := ""
			if cp == myTx {
				mark = "tx" // the claim and the statements of a fenced transaction are one step
				prev := uint64(0)
				for _, c := range claims[id] {
					if c.fenceToken == prev && len(log) > 0 {
						continue
					}
					log = append(log, history.Accepted{Mark: mark, Seq: int64(2 * c.commit), Time: c.at,
						Token: token.Token(c.fenceToken), Kind: "claim"})
					prev = c.fenceToken
				}
			}
			for i := 1; i < len(rows); i++ {
				p, v := rows[i-1], rows[i]
				e := history.Accepted{Mark: mark, Seq: int64(2*v.commit + 1), Time: v.at,
					Token: token.Token(max(v.fenceToken, v.lastToken)), Kind: history.Read, Stock: v.stock, Val: v.val}
				switch {
				case p.stock != v.stock || p.val != v.val:
					e.Kind = history.Write
				case p.fenceToken == v.fenceToken && p.lastToken == v.lastToken:
					continue
				}
				log = append(log, e)
			}
			sort.Slice(log, func(i, j int) bool { return log[i].Seq < log[j].Seq })
			logs[cp][id] = log
		}
	}
	return nil
}

// myColumnStore: fenced, Table.Read and Table.Update — the check in the
// statement that claims or writes; off, a plain SELECT and UPDATE that only
// record the token they were given (last_token) for the resource's log.
type myColumnStore struct {
	copy           string
	db             *sql.DB
	table          *mysql.Table
	fenced, broken bool
}

func (s *myColumnStore) name() string { return s.copy }

func (s *myColumnStore) read(ctx context.Context, item string, t token.Token) (history.State, error) {
	if !s.fenced || s.broken {
		return myPlainRead(ctx, s.db, myTables[s.copy], item)
	}
	var st history.State
	err := s.table.Read(ctx, s.db, item, t, []string{"stock", "val"}, &st.Stock, &st.Val)
	if errors.Is(err, mysql.ErrNoRow) {
		err = errNotFound
	}
	return st, err
}

func (s *myColumnStore) write(ctx context.Context, item string, t token.Token, stock *int, val *string) error {
	if !s.fenced {
		return myPlainWrite(ctx, s.db, myTables[s.copy], item, t, stock, val)
	}
	var set []mysql.Clause
	if stock != nil {
		set = append(set, mysql.Set("stock", *stock))
	}
	if val != nil {
		set = append(set, mysql.Set("val", *val))
	}
	err := s.table.Update(ctx, s.db, item, t, set...)
	if errors.Is(err, mysql.ErrNoRow) {
		err = errNotFound
	}
	return err
}

// myTxStore: fenced, every access is a fenced transaction (Tokens.Tx)
// whose function runs plain SQL; off, the same transactions without the
// claim.
type myTxStore struct {
	copy           string
	db             *sql.DB
	tokens         *mysql.Tokens
	fenced, broken bool
}

func (s *myTxStore) name() string { return s.copy }

func (s *myTxStore) tx(ctx context.Context, item string, t token.Token, claim bool, fn func(*sql.Tx) error) error {
	if claim {
		// Without the lease's end, as pg-tx: this copy is here to show
		// what the resource's mark refuses; the lease bound is checked in
		// storage/mysql.
		return s.tokens.Tx(token.WithExpiry(ctx, nil), s.db, item, t, fn)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s *myTxStore) read(ctx context.Context, item string, t token.Token) (history.State, error) {
	var st history.State
	err := s.tx(ctx, item, t, s.fenced && !s.broken, func(tx *sql.Tx) error {
		var err error
		st, err = myPlainRead(ctx, tx, myTables[s.copy], item)
		return err
	})
	return st, err
}

func (s *myTxStore) write(ctx context.Context, item string, t token.Token, stock *int, val *string) error {
	return s.tx(ctx, item, t, s.fenced, func(tx *sql.Tx) error {
		return myPlainWrite(ctx, tx, myTables[s.copy], item, t, stock, val)
	})
}

// myQuerier is a *sql.DB or a *sql.Tx.
type myQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func myPlainRead(ctx context.Context, db myQuerier, table, item string) (history.State, error) {
	var st history.State
	err := db.QueryRowContext(ctx, `SELECT stock, val FROM `+table+` WHERE id = ?`, item).Scan(&st.Stock, &st.Val)
	if errors.Is(err, sql.ErrNoRows) {
		err = errNotFound
	}
	return st, err
}

// myPlainWrite sets the fields given and records t in last_token, for the
// resource's log, as plainWrite does.
func myPlainWrite(ctx context.Context, db myQuerier, table, item string, t token.Token, stock *int, val *string) error {
	res, err := db.ExecContext(ctx, `UPDATE `+table+` SET stock = COALESCE(?, stock), val = COALESCE(?, val), last_token = ?
		WHERE id = ?`, stock, val, uint64(t), item)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected() // rows matched: clientFoundRows
	if err == nil && n == 0 {
		err = errNotFound
	}
	return err
}

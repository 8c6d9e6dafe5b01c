package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// marks is a store of high-water marks, read and reset by name.
type marks interface {
	HighWater(ctx context.Context, resource string) (token.Token, error)
	Reset(ctx context.Context, resource string, to token.Token) (token.Token, error)
}

// storeOptions are the flags that say where in a store the marks are.
type storeOptions struct {
	store          string
	prefix         string
	tokensTable    string // PostgreSQL high-water table
	table          string // PostgreSQL column mode: the guarded table
	keyColumn      string
	column         string
	connectTimeout time.Duration
	audit          *slog.Logger // receives the reset's audit record
	log            *slog.Logger
}

// openMarks connects to the store and returns its marks, with a
// description for messages and a close function.
func openMarks(ctx context.Context, o storeOptions) (marks, string, func() error, error) {
	if o.store == "" {
		return nil, "", nil, usageErrorf("no store: give --store URL or set %s (%s)", envStore, storeSchemes)
	}
	if o.connectTimeout <= 0 {
		return nil, "", nil, usageErrorf("--connect-timeout %v: must be positive", o.connectTimeout)
	}
	ep, err := parseEndpoint(o.store)
	if err != nil {
		return nil, "", nil, err
	}
	if ep.scheme != schemePostgres && (o.table != "" || o.keyColumn != "" || o.column != "" || o.tokensTable != "") {
		return nil, "", nil, usageErrorf("--table, --key-column, --column and --tokens-table are for postgres:// stores")
	}
	switch ep.scheme {
	case schemePostgres:
		return openPostgresMarks(ctx, ep, o)
	case schemeRedlock:
		return nil, "", nil, usageErrorf("%s: Redlock keeps no marks; the fence of a Redlock setup is the store its writes go to", ep)
	}
	c, err := dial(ctx, ep, o.connectTimeout, o.log)
	if err != nil {
		return nil, "", nil, err
	}
	switch {
	case c.redis != nil:
		return redislock.NewFence(c.redis, redislock.FenceOptions{Prefix: o.prefix, Logger: o.audit}), ep.String(), c.Close, nil
	case c.etcd != nil:
		return etcdlock.NewFence(c.etcd, etcdlock.FenceOptions{Prefix: o.prefix, Logger: o.audit}), ep.String(), c.Close, nil
	case c.zk != nil:
		return zklock.NewFence(c.zk, zklock.FenceOptions{Prefix: o.prefix, Logger: o.audit}), ep.String(), c.Close, nil
	}
	c.Close()
	return nil, "", nil, usageErrorf("%s: not a store; want %s", ep, storeSchemes)
}

func openPostgresMarks(ctx context.Context, ep *endpoint, o storeOptions) (marks, string, func() error, error) {
	if o.prefix != "" {
		return nil, "", nil, usageErrorf("--prefix is not for postgres:// stores: name the table with --tokens-table, or --table for a token column")
	}
	cfg, err := pgx.ParseConfig(ep.raw)
	if err != nil {
		return nil, "", nil, usageErrorf("%s: %v", redactURL(ep.raw), err)
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > o.connectTimeout {
		cfg.ConnectTimeout = o.connectTimeout
	}
	desc := fmt.Sprintf("postgres://%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	var m marks
	switch {
	case o.table != "":
		if o.tokensTable != "" {
			return nil, "", nil, usageErrorf("--tokens-table and --table: give one (--table reads a token column; its tombstones are in fence_tokens)")
		}
		if o.keyColumn == "" {
			return nil, "", nil, usageErrorf("--table needs --key-column, the column that identifies a row")
		}
		tb, err := postgres.NewTable(postgres.TableOptions{
			Name: identifier(o.table), Key: o.keyColumn, Token: o.column, Logger: o.audit,
		})
		if err != nil {
			return nil, "", nil, withCode(exitUsage, err)
		}
		m = &tableMarks{tb: tb}
		desc += " table " + o.table
	default:
		if o.keyColumn != "" || o.column != "" {
			return nil, "", nil, usageErrorf("--key-column and --column go with --table")
		}
		k, err := postgres.NewTokens(postgres.TokensOptions{Name: identifier(o.tokensTable), Logger: o.audit})
		if err != nil {
			return nil, "", nil, withCode(exitUsage, err)
		}
		m = &tokensMarks{k: k}
		if o.tokensTable != "" {
			desc += " table " + o.tokensTable
		}
	}
	cctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered, refusing: no such database, a wrong
			// password.
			return nil, "", nil, withCode(exitSoftware, fmt.Errorf("%s: %w", desc, err))
		}
		return nil, "", nil, withCode(exitUnavailable, fmt.Errorf("%s unreachable: %w", desc, err))
	}
	switch m := m.(type) {
	case *tableMarks:
		m.db = conn
	case *tokensMarks:
		m.db = conn
	}
	return m, desc, func() error { return conn.Close(context.Background()) }, nil
}

// identifier splits "schema.table" into its parts; "" is nil (the
// default).
func identifier(s string) pgx.Identifier {
	if s == "" {
		return nil
	}
	return pgx.Identifier(strings.Split(s, "."))
}

// migrator is a store whose tables fence migrate sets up.
type migrator interface {
	Migrate(ctx context.Context) error
}

// tokensMarks are the marks of a PostgreSQL high-water table.
type tokensMarks struct {
	k  *postgres.Tokens
	db postgres.DB
}

func (m *tokensMarks) HighWater(ctx context.Context, r string) (token.Token, error) {
	return m.k.HighWater(ctx, m.db, r)
}

func (m *tokensMarks) Migrate(ctx context.Context) error { return m.k.Migrate(ctx, m.db) }

func (m *tokensMarks) Reset(ctx context.Context, r string, to token.Token) (token.Token, error) {
	return m.k.Reset(ctx, m.db, r, to)
}

// tableMarks are the marks of the rows of a table in column mode; a
// resource is a row's key, as text.
type tableMarks struct {
	tb *postgres.Table
	db postgres.DB
}

// HighWater is 0 for a key with neither a row nor a tombstone, as for a
// resource without a mark in the other stores.
func (m *tableMarks) HighWater(ctx context.Context, key string) (token.Token, error) {
	hw, err := m.tb.HighWater(ctx, m.db, key)
	if errors.Is(err, postgres.ErrNoRow) {
		return 0, nil
	}
	return hw, err
}

// Migrate creates the high-water table, which keeps the tombstones of
// deleted rows, and adds the token column to the table.
func (m *tableMarks) Migrate(ctx context.Context) error {
	if err := postgres.Migrate(ctx, m.db); err != nil {
		return err
	}
	return m.tb.AddTokenColumn(ctx, m.db)
}

func (m *tableMarks) Reset(ctx context.Context, key string, to token.Token) (token.Token, error) {
	return m.tb.Reset(ctx, m.db, key, to)
}

// serviceError gives an error of a lock service or store its exit code:
// unreachable for network failures and timeouts, usage for bad input,
// fenceguard's own failure otherwise.
func serviceError(what string, err error) error {
	if err == nil {
		return nil
	}
	var (
		netErr net.Error
		pgErr  *pgconn.PgError
	)
	switch {
	case errors.Is(err, token.ErrNoResource), errors.Is(err, token.ErrMissing), errors.Is(err, token.ErrRange):
		return withCode(exitUsage, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, postgres.ErrSchema):
		// The library's fix names its Go functions; this is the shell's.
		return withCode(exitSoftware, fmt.Errorf("%s: %w (fenceguard fence migrate sets the tables up; check --table, --key-column and --column)", what, err))
	case errors.As(err, &pgErr):
		return withCode(exitSoftware, fmt.Errorf("%s: %w", what, err))
	case errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF),
		errors.Is(err, net.ErrClosed), isConnectError(err):
		return withCode(exitUnavailable, fmt.Errorf("%s unreachable: %w", what, err))
	}
	return withCode(exitSoftware, fmt.Errorf("%s: %w", what, err))
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

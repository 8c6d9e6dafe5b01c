package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
)

// Store modes for StoreConfig.Mode.
const (
	StoreAuto     = "auto"     // database URL (PostgreSQL, or MySQL for a mysql:// URL), else throwaway local PostgreSQL, else memory
	StorePostgres = "postgres" // database URL, else throwaway local PostgreSQL, else fail
	StoreMySQL    = "mysql"    // database URL or go-sql-driver DSN, else throwaway local MariaDB, else fail
	StoreMemory   = "memory"
)

// StoreConfig selects the store.
type StoreConfig struct {
	Mode string // StoreAuto (default), StorePostgres, StoreMySQL or StoreMemory
	// URL is the database: a PostgreSQL connection string, or a mysql://
	// URL (see [MySQLConfig]); with StoreMySQL, also a go-sql-driver/mysql
	// data source name. Typically DATABASE_URL.
	URL string
}

// Store is an opened store. Close it when done.
type Store struct {
	service.Store
	// Desc says what the store is, e.g. "PostgreSQL 15.14, throwaway
	// server in /tmp/fenceguard-…".
	Desc string
	// Notice, when set, says what auto mode skipped and why.
	Notice string

	close func() error
}

// Close releases the store: the pool, and the throwaway server with its
// directory.
func (s *Store) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// OpenStore opens the store c selects (see the package doc for auto mode).
// log receives what the throwaway server's start costs.
func OpenStore(ctx context.Context, c StoreConfig, log *slog.Logger) (*Store, error) {
	switch c.Mode {
	case "", StoreAuto:
		if IsMySQLURL(c.URL) {
			return openMySQLStore(ctx, c, log)
		}
	case StorePostgres:
		if IsMySQLURL(c.URL) {
			return nil, errors.New("--store=postgres with a mysql:// database URL: use --store=mysql (or auto)")
		}
	case StoreMySQL:
		return openMySQLStore(ctx, c, log)
	case StoreMemory:
		return &Store{Store: service.NewMemoryStore(), Desc: "in memory (this process)"}, nil
	default:
		return nil, fmt.Errorf("unknown store %q: want auto, postgres, mysql or memory", c.Mode)
	}
	if c.URL != "" {
		s, err := openPostgres(ctx, c.URL, "from the database URL")
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	log.Debug("no database URL: starting a throwaway PostgreSQL server")
	srv, err := pgserver.Start(ctx)
	if err != nil {
		if c.Mode == StorePostgres || ctx.Err() != nil {
			return nil, fmt.Errorf("no database URL, and a local PostgreSQL could not be started: %w", err)
		}
		why := "PostgreSQL is not installed (Debian: apt-get install postgresql)"
		if !errors.Is(err, harness.ErrNotInstalled) {
			why = "a local PostgreSQL did not start: " + firstLine(err.Error())
		}
		return &Store{
			Store: service.NewMemoryStore(),
			Desc:  "in memory (this process)",
			Notice: "PostgreSQL skipped: no DATABASE_URL, and " + why + ".\n" +
				"Using the in-memory store: the same demo, with the middleware's per-item serialization\n" +
				"standing in for the database's check. Set DATABASE_URL for the PostgreSQL setup.",
		}, nil
	}
	s, err := openPostgres(ctx, pgserver.DSN(srv), "throwaway server in "+srvDir(srv))
	if err != nil {
		return nil, errors.Join(err, srv.Close())
	}
	pgClose := s.close
	s.close = func() error { return errors.Join(pgClose(), srv.Close()) }
	return s, nil
}

func openPostgres(ctx context.Context, dsn, where string) (*Store, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	st, err := service.NewPostgresStore(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if f := strings.Fields(version); len(f) > 0 {
		version = f[0]
	}
	return &Store{
		Store: st,
		Desc:  "PostgreSQL " + version + ", " + where,
		close: func() error { pool.Close(); return nil },
	}, nil
}

// srvDir names where the throwaway server lives: the directory of its log.
func srvDir(s *harness.Server) string {
	dir := s.LogFile()
	if i := strings.LastIndexByte(dir, '/'); i > 0 {
		dir = dir[:i]
	}
	return dir
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

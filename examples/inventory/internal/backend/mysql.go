package backend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/harness/mysqlserver"
)

// mysqlScheme starts a database URL that names a MySQL or MariaDB server.
const mysqlScheme = "mysql://"

// otherScheme matches a URL of another scheme (postgres://…), which no data
// source name starts like.
var otherScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// IsMySQLURL reports whether s is a mysql:// URL, which selects the MySQL
// store in auto mode.
func IsMySQLURL(s string) bool {
	return len(s) >= len(mysqlScheme) && strings.EqualFold(s[:len(mysqlScheme)], mysqlScheme)
}

// MySQLConfig returns the driver configuration that s names: a URL
//
//	mysql://user:password@host[:port]/database[?param=value&...]
//
// (port 3306 by default; user and password percent-encoded; the
// parameters are go-sql-driver/mysql's, interpolateParams=true unless the
// URL sets it), or go-sql-driver/mysql's own data source name,
// user:password@tcp(host:port)/database?param=value, taken as the driver
// reads it. Either must name the database. Its errors never repeat the
// password.
func MySQLConfig(s string) (*gomysql.Config, error) {
	if s == "" {
		return nil, errors.New("mysql: no database URL")
	}
	if !IsMySQLURL(s) {
		if m := otherScheme.FindStringSubmatch(s); m != nil {
			return nil, fmt.Errorf("mysql: a %s:// URL is not MySQL's: want mysql://user:password@host:port/database or a go-sql-driver/mysql data source name", m[1])
		}
		cfg, err := gomysql.ParseDSN(s)
		if err != nil {
			return nil, fmt.Errorf("mysql: not a mysql:// URL nor a go-sql-driver/mysql data source name (user:password@tcp(host:port)/database): %w", err)
		}
		if cfg.DBName == "" {
			return nil, errors.New("mysql: the data source name names no database (…/database)")
		}
		return cfg, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue.URL is s, password and all
		}
		return nil, fmt.Errorf("mysql: bad database URL: %w", err)
	}
	if u.Hostname() == "" {
		return nil, errors.New("mysql: the database URL names no host: want mysql://user:password@host:port/database")
	}
	db, err := url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), "/"))
	if err != nil || db == "" || strings.Contains(db, "/") {
		return nil, errors.New("mysql: the database URL must name one database: mysql://user:password@host:port/database")
	}
	if u.Fragment != "" || u.Opaque != "" {
		return nil, errors.New("mysql: the database URL has parts a MySQL URL does not: want mysql://user:password@host:port/database?param=value")
	}
	q := u.RawQuery
	if !u.Query().Has("interpolateParams") {
		q = strings.TrimPrefix(q+"&interpolateParams=true", "&")
	}
	cfg, err := gomysql.ParseDSN("/?" + q)
	if err != nil {
		return nil, fmt.Errorf("mysql: the database URL's parameters: %w", err)
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", net.JoinHostPort(u.Hostname(), port), db
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	return cfg, nil
}

// openMySQL opens the MySQL store on the database cfg names.
func openMySQL(ctx context.Context, cfg *gomysql.Config, where string, log *slog.Logger) (*Store, error) {
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	// Bounded like a pgx pool, and every connection kept: a request that
	// finds none idle would otherwise dial one, and close it after.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: %w", err)
	}
	st, err := service.NewMySQLStore(ctx, db, log)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{
		Store: st,
		Desc:  serverName(version) + ", " + where,
		close: db.Close,
	}, nil
}

// serverName names the server from its VERSION(): "MariaDB 10.11.6" for
// 10.11.6-MariaDB-0+deb12u1, "MySQL 8.4.3" for 8.4.3.
func serverName(version string) string {
	name := "MySQL"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		name = "MariaDB"
	}
	v, _, _ := strings.Cut(version, "-")
	return name + " " + v
}

// openMySQLStore opens the MySQL store: on the database the URL names, or,
// with none, on a throwaway local MariaDB server.
func openMySQLStore(ctx context.Context, c StoreConfig, log *slog.Logger) (*Store, error) {
	if c.URL != "" {
		cfg, err := MySQLConfig(c.URL)
		if err != nil {
			return nil, err
		}
		return openMySQL(ctx, cfg, "from the database URL", log)
	}
	log.Debug("no database URL: starting a throwaway MariaDB server")
	srv, err := mysqlserver.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("no database URL, and a local MariaDB could not be started: %w", err)
	}
	s, err := func() (*Store, error) {
		cfg, err := gomysql.ParseDSN(mysqlserver.DSN(srv))
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, err
		}
		_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS inventory")
		db.Close()
		if err != nil {
			return nil, fmt.Errorf("mysql: %w", err)
		}
		cfg.DBName = "inventory"
		return openMySQL(ctx, cfg, "throwaway server in "+srvDir(srv), log)
	}()
	if err != nil {
		return nil, errors.Join(err, srv.Close())
	}
	myClose := s.close
	s.close = func() error { return errors.Join(myClose(), srv.Close()) }
	return s, nil
}

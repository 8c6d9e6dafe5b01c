package pgwire

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// Config is what Connect needs to reach a server and log in.
type Config struct {
	// Hosts are tried in order; a host starting with "/" is a directory
	// holding the server's Unix socket. Ports is parallel to Hosts.
	Hosts []string
	Ports []int

	User     string
	Password string
	Database string

	// SSLMode is libpq's: disable, allow and prefer (TLS if the server
	// offers it, unverified), require (TLS, unverified unless SSLRootCert
	// is set), verify-ca (chain only), verify-full (chain and host name).
	SSLMode     string
	SSLRootCert string // PEM file of the CAs to trust; empty: the system's
}

// ParseDSN reads a libpq connection string: a URL
// (postgres://user:password@host:port,host2/db?sslmode=require) or
// keyword/value pairs (host=h port=5432 user=u password='a b' dbname=d).
// Missing values come from PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
// PGSSLMODE and PGSSLROOTCERT, then libpq's defaults (localhost, 5432, the
// OS user, a database named after the user, sslmode prefer). Parameters it
// does not know (pool_max_conns, application_name, …) are ignored; a later
// keyword wins over an earlier one. ~/.pgpass and service files are not
// read.
func ParseDSN(dsn string) (*Config, error) {
	kv := map[string]string{}
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		err = parseURL(dsn, kv)
	} else {
		err = parseKeywords(dsn, kv)
	}
	if err != nil {
		return nil, err
	}
	for key, env := range map[string]string{
		"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD",
		"dbname": "PGDATABASE", "sslmode": "PGSSLMODE", "sslrootcert": "PGSSLROOTCERT",
	} {
		if _, ok := kv[key]; !ok {
			if v := os.Getenv(env); v != "" {
				kv[key] = v
			}
		}
	}
	cfg := &Config{
		User:        kv["user"],
		Password:    kv["password"],
		Database:    kv["dbname"],
		SSLMode:     kv["sslmode"],
		SSLRootCert: kv["sslrootcert"],
	}
	if cfg.User == "" {
		if u, err := user.Current(); err == nil {
			cfg.User = u.Username
		}
	}
	if cfg.Database == "" {
		cfg.Database = cfg.User
	}
	switch cfg.SSLMode {
	case "":
		cfg.SSLMode = "prefer"
	case "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		return nil, fmt.Errorf("pgwire: unknown sslmode %q", cfg.SSLMode)
	}
	hosts := strings.Split(kv["host"], ",")
	ports := strings.Split(kv["port"], ",")
	if len(ports) != 1 && len(ports) != len(hosts) {
		return nil, fmt.Errorf("pgwire: %d hosts but %d ports", len(hosts), len(ports))
	}
	for i, h := range hosts {
		if h == "" {
			h = "localhost"
		}
		ps := ports[0]
		if len(ports) > 1 {
			ps = ports[i]
		}
		p := 5432
		if ps != "" {
			if p, err = strconv.Atoi(ps); err != nil || p <= 0 || p > 65535 {
				return nil, fmt.Errorf("pgwire: bad port %q", ps)
			}
		}
		cfg.Hosts, cfg.Ports = append(cfg.Hosts, h), append(cfg.Ports, p)
	}
	return cfg, nil
}

// parseURL handles the URL form. The authority may list several
// host[:port] separated by commas, which net/url refuses, so it is split
// off by hand.
func parseURL(dsn string, kv map[string]string) error {
	_, rest, _ := strings.Cut(dsn, "://")
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	u, err := url.Parse("postgres://" + userinfo + "placeholder" + tail)
	if err != nil {
		return fmt.Errorf("pgwire: bad URL: %w", err)
	}
	if u.User != nil {
		kv["user"] = u.User.Username()
		if p, ok := u.User.Password(); ok {
			kv["password"] = p
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		kv["dbname"] = db
	}
	if authority != "" {
		var hosts, ports []string
		for _, hp := range strings.Split(authority, ",") {
			h, p := hp, ""
			if strings.HasPrefix(hp, "[") || strings.Count(hp, ":") == 1 {
				if hh, pp, err := net.SplitHostPort(hp); err == nil {
					h, p = hh, pp
				} else if !strings.HasSuffix(hp, "]") {
					return fmt.Errorf("pgwire: bad host %q: %w", hp, err)
				} else {
					h = strings.Trim(hp, "[]")
				}
			}
			h, err := url.PathUnescape(h) // %2Fvar%2Frun%2Fpostgresql
			if err != nil {
				return fmt.Errorf("pgwire: bad host %q: %w", hp, err)
			}
			hosts, ports = append(hosts, h), append(ports, p)
		}
		kv["host"] = strings.Join(hosts, ",")
		if strings.Join(ports, "") != "" {
			kv["port"] = strings.Join(ports, ",")
		}
	}
	for k, vs := range u.Query() {
		kv[k] = vs[len(vs)-1]
	}
	return nil
}

// parseKeywords handles key=value pairs separated by spaces; a value may be
// single-quoted, with \' and \\ escapes.
func parseKeywords(s string, kv map[string]string) error {
	for {
		s = strings.TrimLeft(s, " \t\n\r")
		if s == "" {
			return nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return fmt.Errorf("pgwire: %q is not key=value", s)
		}
		key := strings.TrimSpace(s[:eq])
		if key == "" || strings.ContainsAny(key, " \t") {
			return fmt.Errorf("pgwire: bad keyword in %q", s)
		}
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val strings.Builder
		if strings.HasPrefix(s, "'") {
			s = s[1:]
			closed := false
			for len(s) > 0 {
				c := s[0]
				s = s[1:]
				if c == '\\' && len(s) > 0 {
					val.WriteByte(s[0])
					s = s[1:]
					continue
				}
				if c == '\'' {
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return fmt.Errorf("pgwire: unterminated quoted value for %s", key)
			}
		} else {
			for len(s) > 0 && s[0] != ' ' && s[0] != '\t' && s[0] != '\n' && s[0] != '\r' {
				if s[0] == '\\' && len(s) > 1 {
					s = s[1:]
				}
				val.WriteByte(s[0])
				s = s[1:]
			}
		}
		kv[key] = val.String()
	}
}

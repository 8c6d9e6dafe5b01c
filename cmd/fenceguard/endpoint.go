package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// The schemes of --lock and --store URLs.
const (
	schemeRedis    = "redis"
	schemeRediss   = "rediss"
	schemeSentinel = "redis+sentinel"
	schemeCluster  = "redis+cluster"
	schemeRedlock  = "redlock"
	schemeEtcd     = "etcd"
	schemeZK       = "zk"
	schemePostgres = "postgres"
)

// lockSchemes lists the schemes --lock takes, for messages.
const lockSchemes = "redis://, rediss://, redis+sentinel://, redis+cluster://, redlock://, etcd:// or zk://"

// storeSchemes lists the schemes --store takes, for messages.
const storeSchemes = "postgres://, redis://, rediss://, redis+sentinel://, redis+cluster://, etcd:// or zk://"

// defaultPorts are the ports a host without one gets, per scheme.
var defaultPorts = map[string]string{
	schemeRedis:    "6379",
	schemeRediss:   "6379",
	schemeSentinel: "26379",
	schemeCluster:  "6379",
	schemeRedlock:  "6379",
	schemeEtcd:     "2379",
	schemeZK:       "2181",
}

// An endpoint is a parsed --lock or --store URL: the scheme, the
// credentials, one or more host:port and what follows them.
type endpoint struct {
	raw      string // as given, for PostgreSQL's own parser
	scheme   string
	user     string
	password string
	hasPass  bool
	hosts    []string // host:port, at least one
	path     string   // without the leading "/"
}

// String is the URL with the password left out, for messages.
func (e *endpoint) String() string {
	var b strings.Builder
	b.WriteString(e.scheme + "://")
	if e.user != "" || e.hasPass {
		b.WriteString(url.PathEscape(e.user))
		if e.hasPass {
			b.WriteString(":xxxxx")
		}
		b.WriteString("@")
	}
	b.WriteString(strings.Join(e.hosts, ","))
	if e.path != "" {
		b.WriteString("/" + e.path)
	}
	return b.String()
}

// parseEndpoint parses a URL of one of the schemes in defaultPorts (and
// postgres://, kept whole for pgx). Several hosts are separated by commas;
// a host without a port gets the scheme's default port. Query strings and
// fragments are refused: no option is read from them.
func parseEndpoint(raw string) (*endpoint, error) {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return nil, usageErrorf("%q is not a URL: want scheme://host:port, e.g. redis://127.0.0.1:6379", redactURL(raw))
	}
	e := &endpoint{raw: raw, scheme: strings.ToLower(raw[:i])}
	if e.scheme == "postgresql" {
		e.scheme = schemePostgres
	}
	rest := raw[i+3:]
	if e.scheme == schemePostgres {
		return e, nil // pgx parses it, with its own options
	}
	if _, ok := defaultPorts[e.scheme]; !ok {
		return nil, usageErrorf("unknown scheme %q in %s", e.scheme, redactURL(raw))
	}
	auth, tail := rest, ""
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		auth, tail = rest[:j], rest[j:]
	}
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		info := auth[:at]
		auth = auth[at+1:]
		user, pass, hasPass := strings.Cut(info, ":")
		var err error
		if e.user, err = url.PathUnescape(user); err != nil {
			return nil, usageErrorf("bad user name in %s: %v", redactURL(raw), err)
		}
		if e.password, err = url.PathUnescape(pass); err != nil {
			return nil, usageErrorf("bad password in %s: %v", redactURL(raw), err)
		}
		e.hasPass = hasPass
	}
	for _, h := range strings.Split(auth, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			// No port (or an IPv6 address without brackets): add the
			// default, then check again.
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPorts[e.scheme])
			if _, _, err := net.SplitHostPort(h); err != nil {
				return nil, usageErrorf("bad host %q in %s", h, redactURL(raw))
			}
		}
		host, port, _ := net.SplitHostPort(h)
		if host == "" {
			return nil, usageErrorf("no host name in %q of %s", h, redactURL(raw))
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, usageErrorf("bad port %q in %s", port, redactURL(raw))
		}
		e.hosts = append(e.hosts, h)
	}
	if len(e.hosts) == 0 {
		return nil, usageErrorf("no host in %s", redactURL(raw))
	}
	if tail != "" {
		u, err := url.Parse(tail)
		if err != nil {
			return nil, usageErrorf("bad URL %s: %v", redactURL(raw), err)
		}
		if u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(tail, "?#") {
			return nil, usageErrorf("%s: query strings and fragments are not read; use the command's flags", redactURL(raw))
		}
		e.path = strings.Trim(u.Path, "/")
	}
	return e, nil
}

// singleHost refuses an endpoint with more than one host.
func (e *endpoint) singleHost() error {
	if len(e.hosts) != 1 {
		return usageErrorf("%s names %d hosts; %s:// takes one (redis+cluster:// for a cluster, redlock:// for independent nodes)", e, len(e.hosts), e.scheme)
	}
	return nil
}

// noPath refuses an endpoint with a path.
func (e *endpoint) noPath() error {
	if e.path != "" {
		return usageErrorf("%s: %s:// takes no path (use --prefix for where the keys live)", e, e.scheme)
	}
	return nil
}

// redisDB returns the database number of a redis:// path, 0 when none.
func redisDB(e *endpoint, path string) (int, error) {
	if path == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(path)
	if err != nil || n < 0 {
		return 0, usageErrorf("%s: the path must be a database number, not %q", e, path)
	}
	return n, nil
}

// redactURL hides the password of a URL that could not be parsed.
func redactURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return fmt.Sprintf("%.40q", raw)
	}
	rest := raw[i+3:]
	end := len(rest)
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		end = j
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return raw
	}
	return raw[:i+3] + user + ":xxxxx" + rest[at:]
}

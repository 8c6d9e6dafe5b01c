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
	if i <= 0 && strings.Contains(raw, "=") {
		// A PostgreSQL keyword/value string: host=... dbname=...
		return &endpoint{raw: raw, scheme: schemePostgres}, nil
	}
	if i <= 0 {
		// Not echoed: it may be a password.
		return nil, usageErrorf("a %d-character value is not a URL: want scheme://host:port, e.g. redis://127.0.0.1:6379", len(raw))
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
	// The credentials end at the last "@": a password may hold "/", "?"
	// or "#" unescaped, and the hosts and path hold no "@".
	info, hostsAndPath, hasInfo := "", rest, false
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		info, hostsAndPath, hasInfo = rest[:at], rest[at+1:], true
	}
	auth, tail := hostsAndPath, ""
	if j := strings.IndexAny(hostsAndPath, "/?#"); j >= 0 {
		auth, tail = hostsAndPath[:j], hostsAndPath[j:]
	}
	if hasInfo {
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
			return nil, usageErrorf("an empty host in %s", redactURL(raw))
		}
		if !strings.Contains(h, ":") || (strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]")) {
			// No port: a name, an IPv4 address or a bracketed IPv6 one.
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPorts[e.scheme])
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return nil, usageErrorf("bad host %q in %s: want host:port, [ipv6]:port", h, redactURL(raw))
		}
		if host == "" || strings.ContainsAny(host, "[]") {
			return nil, usageErrorf("bad host name in %q of %s", h, redactURL(raw))
		}
		n, err := strconv.Atoi(port)
		if err != nil || n <= 0 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
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

// redactURL hides the password of a URL that could not be parsed: all that
// precedes the last "@" but the user name. A value that is not a URL is not
// shown at all.
func redactURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return fmt.Sprintf("(a %d-character value that is not a URL)", len(raw))
	}
	rest := raw[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return raw
	}
	return raw[:i+3] + user + ":xxxxx" + rest[at:]
}

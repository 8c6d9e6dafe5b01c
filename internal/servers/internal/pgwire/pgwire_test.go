package pgwire

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dsnFor(addr, user, password, extra string) string {
	host, port, _ := net.SplitHostPort(addr)
	dsn := "host=" + host + " port=" + port + " user=" + user + " dbname=postgres"
	if password != "" {
		dsn += " password='" + strings.ReplaceAll(password, "'", `\'`) + "'"
	}
	return dsn + " " + extra
}

func TestLogin(t *testing.T) {
	for _, c := range []struct {
		name     string
		auth     string
		password string // the client's; the server's is "s3cret 'x'"
		wantErr  error
		wantCode string
	}{
		// initdb -A trust: no password asked.
		{name: "trust", auth: "trust"},
		{name: "cleartext", auth: "password", password: "s3cret 'x'"},
		{name: "cleartext wrong", auth: "password", password: "nope", wantCode: CodeInvalidPassword},
		{name: "md5", auth: "md5", password: "s3cret 'x'"},
		{name: "md5 wrong", auth: "md5", password: "nope", wantCode: CodeInvalidPassword},
		// PostgreSQL ≥ 14's default password_encryption.
		{name: "scram", auth: "scram", password: "s3cret 'x'"},
		{name: "scram wrong", auth: "scram", password: "nope", wantCode: CodeInvalidPassword},
		// A server that cannot prove it knows the password is not trusted,
		// even though it says AuthenticationOk.
		{name: "scram bad server signature", auth: "scram-badsig", password: "s3cret 'x'", wantErr: errAny},
		{name: "scram without final", auth: "scram-nofinal", password: "s3cret 'x'", wantErr: errAny},
		// Methods the harness does not speak fail clearly, and do not hang.
		{name: "kerberos", auth: "kerberos", wantErr: errAny},
		// A FATAL during startup (no such database) carries its SQLSTATE.
		{name: "fatal", auth: "fatal", wantCode: "3D000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := serve(t, &fakeBackend{auth: c.auth, password: "s3cret 'x'"})
			conn, err := Connect(ctx5s(t), dsnFor(addr, "alice", c.password, "sslmode=disable"))
			if conn != nil {
				defer conn.Close()
			}
			switch {
			case c.wantCode != "":
				var pe *Error
				if !errors.As(err, &pe) || pe.Code != c.wantCode {
					t.Fatalf("err = %v, want SQLSTATE %s", err, c.wantCode)
				}
			case c.wantErr != nil:
				if err == nil {
					t.Fatal("login succeeded")
				}
			case err != nil:
				t.Fatal(err)
			default:
				if v := conn.Parameter("server_version"); v != "15.0" {
					t.Fatalf("server_version = %q", v)
				}
			}
		})
	}
}

// The startup message names user and database.
func TestStartupParameters(t *testing.T) {
	b := &fakeBackend{auth: "trust"}
	addr := serve(t, b)
	host, port, _ := net.SplitHostPort(addr)
	c, err := Connect(ctx5s(t), "postgres://bob@"+host+":"+port+"/fg_db?sslmode=disable&pool_max_conns=3")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.startup["user"] != "bob" || b.startup["database"] != "fg_db" {
		t.Fatalf("startup = %v", b.startup)
	}
}

// RFC 7677's example exchange, with its fixed client nonce.
func TestSCRAMVector(t *testing.T) {
	s, err := newSCRAM("user", "pencil", "rOprNGfwEbeRWgbNEkqO")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.first(); got != "n,,n=user,r=rOprNGfwEbeRWgbNEkqO" {
		t.Fatalf("client-first = %q", got)
	}
	final, err := s.final("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if err != nil {
		t.Fatal(err)
	}
	if want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="; final != want {
		t.Fatalf("client-final = %q, want %q", final, want)
	}
	if err := s.verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err != nil {
		t.Fatal(err)
	}
	if err := s.verify("v=" + base64.StdEncoding.EncodeToString(make([]byte, 32))); err == nil {
		t.Fatal("a wrong server signature verified")
	}
}

func TestSCRAMRefusesBadServerFirst(t *testing.T) {
	for name, msg := range map[string]string{
		"nonce not ours":  "r=someoneelse,s=c2FsdA==,i=4096",
		"nonce unchanged": "r=abc,s=c2FsdA==,i=4096",
		"no salt":         "r=abcdef,i=4096",
		"zero iterations": "r=abcdef,s=c2FsdA==,i=0",
	} {
		s, _ := newSCRAM("", "pw", "abc")
		if _, err := s.final(msg); err == nil {
			t.Errorf("%s: %q accepted", name, msg)
		}
	}
}

// The md5 value for user "postgres", password "secret", salt 01020304, as
// computed independently (Python's hashlib) from libpq's definition.
func TestMD5Password(t *testing.T) {
	if got := md5Password("postgres", "secret", []byte{1, 2, 3, 4}); got != "md5bb41a296aab6baccb36ff243a562abff" {
		t.Fatalf("md5Password = %q", got)
	}
}

func TestTLS(t *testing.T) {
	srvTLS, root := selfSigned(t, "localhost")
	for _, c := range []struct {
		name    string
		offer   bool   // the server accepts SSLRequest
		mode    string // client sslmode
		extra   string
		host    string
		wantTLS bool
		wantErr bool
	}{
		// libpq's default: TLS when offered, without checking the certificate.
		{name: "prefer offered", offer: true, mode: "prefer", wantTLS: true},
		{name: "prefer not offered", offer: false, mode: "prefer"},
		{name: "require unverified", offer: true, mode: "require", wantTLS: true},
		{name: "require not offered", offer: false, mode: "require", wantErr: true},
		// The certificate names localhost, not 127.0.0.1.
		{name: "verify-ca", offer: true, mode: "verify-ca", extra: "sslrootcert=" + root, wantTLS: true},
		{name: "verify-full wrong name", offer: true, mode: "verify-full", extra: "sslrootcert=" + root, wantErr: true},
		{name: "verify-full", offer: true, mode: "verify-full", extra: "sslrootcert=" + root, host: "localhost", wantTLS: true},
		// Unknown CA.
		{name: "verify-ca system roots", offer: true, mode: "verify-ca", wantErr: true},
		{name: "disable", offer: true, mode: "disable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &fakeBackend{auth: "scram", password: "pw", queries: map[string][]reply{
				"SELECT 1": {rowDesc("?column?"), dataRow(str("1")), complete("SELECT 1")},
			}}
			if c.offer {
				b.tls = srvTLS
			}
			addr := serve(t, b)
			if c.host != "" {
				_, port, _ := net.SplitHostPort(addr)
				addr = net.JoinHostPort(c.host, port)
			}
			conn, err := Connect(ctx5s(t), dsnFor(addr, "u", "pw", "sslmode="+c.mode+" "+c.extra))
			if conn != nil {
				defer conn.Close()
			}
			if c.wantErr {
				if err == nil {
					t.Fatal("connected")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b.mu.Lock()
			saw := b.sawTLS
			b.mu.Unlock()
			if saw != c.wantTLS {
				t.Fatalf("TLS used: %v, want %v", saw, c.wantTLS)
			}
			if _, err := conn.Query(ctx5s(t), "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestQuery(t *testing.T) {
	b := &fakeBackend{auth: "trust", queries: map[string][]reply{
		"SELECT 1": {rowDesc("?column?"), dataRow(str("1")), complete("SELECT 1")},
		"SELECT a, b FROM t": {rowDesc("a", "b"),
			dataRow(str("x"), nil), dataRow(str(""), str("y\x00z")), complete("SELECT 2")},
		"CREATE TABLE t (); INSERT INTO t VALUES ()": {complete("CREATE TABLE"), complete("INSERT 0 1")},
		"":      {{'I', nil}},
		"NOTE":  {{'N', []byte("SNOTICE\x00Mhello\x00\x00")}, complete("DO")},
		"COPY":  {{'G', []byte{0, 0, 0}}},
		"MIXED": {complete("CREATE DATABASE"), errorMsg(CodeDuplicateDatabase, `database "x" already exists`)},
	}}
	addr := serve(t, b)
	c, err := Connect(ctx5s(t), dsnFor(addr, "u", "", "sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctx5s(t)

	if v, err := c.QueryValue(ctx, "SELECT 1"); err != nil || v != "1" {
		t.Fatalf("SELECT 1 = %q, %v", v, err)
	}
	rs, err := c.Query(ctx, "SELECT a, b FROM t")
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{Tag: "SELECT 2", Columns: []string{"a", "b"}, Rows: [][]string{{"x", ""}, {"", "y\x00z"}}}}
	if !reflect.DeepEqual(rs, want) {
		t.Fatalf("Query = %#v, want %#v", rs, want)
	}
	rs, err = c.Query(ctx, "CREATE TABLE t (); INSERT INTO t VALUES ()")
	if err != nil || len(rs) != 2 || rs[1].Tag != "INSERT 0 1" {
		t.Fatalf("two statements = %#v, %v", rs, err)
	}
	if rs, err := c.Query(ctx, ""); err != nil || len(rs) != 1 {
		t.Fatalf("empty query = %#v, %v", rs, err)
	}
	if err := c.Exec(ctx, "NOTE"); err != nil {
		t.Fatalf("a notice failed the query: %v", err)
	}
	// COPY FROM STDIN is refused with CopyFail instead of hanging.
	if err := c.Exec(ctx, "COPY"); err == nil {
		t.Fatal("COPY succeeded")
	}
	// The error of a later statement is returned, with its SQLSTATE and detail.
	err = c.Exec(ctx, "MIXED")
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeDuplicateDatabase || pe.Detail != "some detail" || pe.Severity != "ERROR" {
		t.Fatalf("err = %#v, want duplicate_database", err)
	}
	if _, err := c.QueryValue(ctx, "SELECT a, b FROM t"); err == nil {
		t.Fatal("QueryValue of two columns succeeded")
	}
	// An SQL error leaves the session usable.
	if v, err := c.QueryValue(ctx, "SELECT 1"); err != nil || v != "1" {
		t.Fatalf("after an error: %q, %v", v, err)
	}
	if err := c.Exec(ctx, "A\x00B"); err == nil {
		t.Fatal("a NUL byte went out")
	}
}

// A server that accepts and never answers: the context bounds the login.
func TestContextBoundsLogin(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c) // never answers; ends when the client gives up
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Connect(ctx, dsnFor(l.Addr().String(), "u", "", "sslmode=prefer"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("the deadline did not end the login")
	}
	l.Close()
	<-done
}

// Several hosts: an unreachable one is skipped; a refused login is not
// retried elsewhere.
func TestHostList(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	good := serve(t, &fakeBackend{auth: "trust"})
	_, dp, _ := net.SplitHostPort(deadAddr)
	_, gp, _ := net.SplitHostPort(good)
	c, err := Connect(ctx5s(t), "postgresql://u@127.0.0.1:"+dp+",127.0.0.1:"+gp+"/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestParseDSN(t *testing.T) {
	for _, env := range []string{"PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGSSLMODE", "PGSSLROOTCERT"} {
		t.Setenv(env, "")
	}
	for _, c := range []struct {
		name string
		dsn  string
		want Config
	}{
		{"url", "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable",
			Config{Hosts: []string{"127.0.0.1"}, Ports: []int{5433}, User: "postgres", Database: "postgres", SSLMode: "disable"}},
		// Percent-escapes in the password; the default port; sslmode prefer.
		{"url password", "postgresql://u:p%40ss%3Aw@db.example/app",
			Config{Hosts: []string{"db.example"}, Ports: []int{5432}, User: "u", Password: "p@ss:w", Database: "app", SSLMode: "prefer"}},
		// Several hosts, an IPv6 one included, which net/url would refuse.
		{"url hosts", "postgres://u@h1:1,[::1]:2,h3/d",
			Config{Hosts: []string{"h1", "::1", "h3"}, Ports: []int{1, 2, 5432}, User: "u", Database: "d", SSLMode: "prefer"}},
		// A socket directory given as a query parameter.
		{"url socket", "postgres:///d?host=/var/run/postgresql&user=u&port=5433",
			Config{Hosts: []string{"/var/run/postgresql"}, Ports: []int{5433}, User: "u", Database: "d", SSLMode: "prefer"}},
		{"keywords", "host=h port=5 user=u password='a b\\'c' dbname=d sslmode=require",
			Config{Hosts: []string{"h"}, Ports: []int{5}, User: "u", Password: "a b'c", Database: "d", SSLMode: "require"}},
		// Spaces around '=', a later keyword wins, unknown ones are ignored.
		{"keywords loose", "host = h  dbname=x dbname=y application_name=z user=u",
			Config{Hosts: []string{"h"}, Ports: []int{5432}, User: "u", Database: "y", SSLMode: "prefer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseDSN(c.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, c.want) {
				t.Fatalf("ParseDSN(%q) = %+v, want %+v", c.dsn, *got, c.want)
			}
		})
	}
	t.Setenv("PGPASSWORD", "fromenv")
	t.Setenv("PGUSER", "envuser")
	got, err := ParseDSN("host=h")
	if err != nil || got.Password != "fromenv" || got.User != "envuser" || got.Database != "envuser" {
		t.Fatalf("environment defaults: %+v, %v", got, err)
	}
	for _, bad := range []string{"host", "host='unterminated", "sslmode=sometimes", "port=99999", "postgres://u@h:x/d", "host=a,b port=1,2,3"} {
		if _, err := ParseDSN(bad); err == nil {
			t.Errorf("ParseDSN(%q) accepted", bad)
		}
	}
}

func TestQuote(t *testing.T) {
	if got := QuoteIdentifier(`fg_"x`); got != `"fg_""x"` {
		t.Errorf("QuoteIdentifier = %s", got)
	}
	for in, want := range map[string]string{`it's`: `'it''s'`, `a\b`: `E'a\\b'`, "": `''`} {
		if got := QuoteLiteral(in); got != want {
			t.Errorf("QuoteLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}

package pgwire

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxMessage bounds a backend message, so a confused peer cannot make the
// harness allocate without bound.
const maxMessage = 64 << 20

// ErrProtocol is wrapped by errors about messages this package cannot handle.
var ErrProtocol = errors.New("pgwire: protocol error")

// Error is a server's ErrorResponse (or a FATAL during login).
type Error struct {
	Severity string // ERROR, FATAL, PANIC
	Code     string // SQLSTATE, e.g. 42P04 duplicate_database
	Message  string
	Detail   string
	Hint     string
}

func (e *Error) Error() string {
	s := e.Severity + ": " + e.Message + " (SQLSTATE " + e.Code + ")"
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// SQLSTATEs the harness tests for.
const (
	CodeSyntaxError       = "42601"
	CodeDuplicateDatabase = "42P04"
	CodeInvalidPassword   = "28P01"
	CodeCannotConnectNow  = "57P03" // the database system is starting up
)

// Result is what one statement returned.
type Result struct {
	Tag     string     // the command tag, e.g. "INSERT 0 2", "CREATE DATABASE"
	Columns []string   // column names; nil for statements without rows
	Rows    [][]string // text values; SQL NULL reads as "" (the harness never needs to tell them apart)
}

// Conn is one logged-in session.
type Conn struct {
	nc     net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	params map[string]string // ParameterStatus values
	closed bool
}

// Connect parses dsn (see [ParseDSN]) and logs in.
func Connect(ctx context.Context, dsn string) (*Conn, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return ConnectConfig(ctx, cfg)
}

// ConnectConfig logs in to the first of cfg's hosts that accepts a
// connection. A server that refuses the login (bad password, no such
// database) ends the attempt: later hosts are not tried for it.
func ConnectConfig(ctx context.Context, cfg *Config) (*Conn, error) {
	var errs []error
	for i, h := range cfg.Hosts {
		c, err := connectOne(ctx, cfg, h, cfg.Ports[i])
		if err == nil {
			return c, nil
		}
		var pe *Error
		if errors.As(err, &pe) || ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func connectOne(ctx context.Context, cfg *Config, host string, port int) (*Conn, error) {
	var d net.Dialer
	var nc net.Conn
	var err error
	unix := strings.HasPrefix(host, "/")
	if unix {
		nc, err = d.DialContext(ctx, "unix", host+"/.s.PGSQL."+strconv.Itoa(port))
	} else {
		nc, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, params: map[string]string{}}
	c.setBuffers()
	err = c.withContext(ctx, func() error {
		if !unix && cfg.SSLMode != "disable" {
			if err := c.startTLS(cfg, host); err != nil {
				return err
			}
		}
		return c.login(cfg)
	})
	if err != nil {
		c.nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) setBuffers() {
	c.r = bufio.NewReader(c.nc)
	c.w = bufio.NewWriter(c.nc)
}

// withContext runs fn with the connection's deadline tied to ctx.
func (c *Conn) withContext(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	nc := c.nc
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	} else {
		nc.SetDeadline(time.Time{})
	}
	err := fn()
	if err != nil {
		if cerr := ctxErr(ctx); cerr != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				err = fmt.Errorf("%w (%v)", cerr, err)
			}
		}
	}
	return err
}

// ctxErr is ctx.Err(), or DeadlineExceeded once the deadline has passed: the
// socket's deadline (the same instant) may fire before ctx's own timer.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// startTLS sends SSLRequest and, if the server agrees, switches to TLS.
func (c *Conn) startTLS(cfg *Config, host string) error {
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:], 8)
	binary.BigEndian.PutUint32(req[4:], 80877103)
	if _, err := c.nc.Write(req[:]); err != nil {
		return err
	}
	var resp [1]byte
	if _, err := io.ReadFull(c.nc, resp[:]); err != nil {
		return err
	}
	switch resp[0] {
	case 'N':
		switch cfg.SSLMode {
		case "allow", "prefer":
			return nil
		}
		return fmt.Errorf("pgwire: sslmode=%s but the server does not offer TLS", cfg.SSLMode)
	case 'S':
	default:
		return fmt.Errorf("%w: answer %q to SSLRequest", ErrProtocol, resp[0])
	}
	tc, err := tlsConfig(cfg, host)
	if err != nil {
		return err
	}
	t := tls.Client(c.nc, tc)
	if err := t.Handshake(); err != nil {
		return fmt.Errorf("pgwire: TLS: %w", err)
	}
	c.nc = t
	c.setBuffers()
	return nil
}

func tlsConfig(cfg *Config, host string) (*tls.Config, error) {
	var roots *x509.CertPool
	if cfg.SSLRootCert != "" {
		pem, err := os.ReadFile(cfg.SSLRootCert)
		if err != nil {
			return nil, fmt.Errorf("pgwire: sslrootcert: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pgwire: sslrootcert %s: no certificate", cfg.SSLRootCert)
		}
	}
	verify := cfg.SSLMode == "verify-ca" || cfg.SSLMode == "verify-full" ||
		(cfg.SSLMode == "require" && roots != nil) // libpq: require with a root cert verifies the chain
	tc := &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12}
	switch {
	case !verify:
		tc.InsecureSkipVerify = true // libpq's prefer and require: encrypted, not authenticated
	case cfg.SSLMode != "verify-full":
		tc.InsecureSkipVerify = true // the chain is checked below, the name is not
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, roots)
		}
	}
	return tc, nil
}

func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("pgwire: the server sent no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

// login sends the startup message, authenticates and waits for the first
// ReadyForQuery.
func (c *Conn) login(cfg *Config) error {
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 3<<16) // protocol 3.0
	for _, kv := range [][2]string{
		{"user", cfg.User}, {"database", cfg.Database},
		{"application_name", "fenceguard-servers"}, {"client_encoding", "UTF8"},
	} {
		body = append(append(body, kv[0]...), 0)
		body = append(append(body, kv[1]...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))
	if _, err := c.w.Write(append(msg, body...)); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	var scram *scramClient
	for {
		typ, m, err := c.readMessage()
		if err != nil {
			return err
		}
		switch typ {
		case 'R':
			if len(m) < 4 {
				return fmt.Errorf("%w: short authentication message", ErrProtocol)
			}
			code, data := binary.BigEndian.Uint32(m), m[4:]
			switch code {
			case 0: // AuthenticationOk
			case 3: // cleartext
				if err := c.send('p', append([]byte(cfg.Password), 0)); err != nil {
					return err
				}
			case 5: // md5, with a 4-byte salt
				if len(data) != 4 {
					return fmt.Errorf("%w: md5 salt of %d bytes", ErrProtocol, len(data))
				}
				if err := c.send('p', append([]byte(md5Password(cfg.User, cfg.Password, data)), 0)); err != nil {
					return err
				}
			case 10: // SASL: the mechanisms the server offers
				if !hasMechanism(data, "SCRAM-SHA-256") {
					return fmt.Errorf("pgwire: server offers SASL mechanisms %q, not SCRAM-SHA-256", strings.Split(strings.Trim(string(data), "\x00"), "\x00"))
				}
				var err error
				if scram, err = newSCRAM("", cfg.Password, ""); err != nil {
					return err
				}
				first := scram.first()
				p := append([]byte("SCRAM-SHA-256"), 0)
				p = binary.BigEndian.AppendUint32(p, uint32(len(first)))
				if err := c.send('p', append(p, first...)); err != nil {
					return err
				}
			case 11: // SASLContinue: server-first-message
				if scram == nil {
					return fmt.Errorf("%w: SASLContinue before SASL", ErrProtocol)
				}
				final, err := scram.final(string(data))
				if err != nil {
					return err
				}
				if err := c.send('p', []byte(final)); err != nil {
					return err
				}
			case 12: // SASLFinal: server-final-message
				if scram == nil {
					return fmt.Errorf("%w: SASLFinal before SASL", ErrProtocol)
				}
				if err := scram.verify(string(data)); err != nil {
					return err
				}
			default:
				return fmt.Errorf("pgwire: authentication method %d is not supported (trust, password, md5 and scram-sha-256 are)", code)
			}
		case 'E':
			return parseError(m)
		case 'S':
			c.parameterStatus(m)
		case 'K', 'N': // BackendKeyData, NoticeResponse
		case 'Z':
			if scram != nil && !scram.verified {
				return errors.New("pgwire: server ended SCRAM without proving it knows the password")
			}
			return nil
		default:
			return fmt.Errorf("%w: message %q during login", ErrProtocol, typ)
		}
	}
}

func hasMechanism(list []byte, name string) bool {
	for _, m := range strings.Split(string(list), "\x00") {
		if m == name {
			return true
		}
	}
	return false
}

// md5Password is "md5" + md5hex(md5hex(password + user) + salt).
func md5Password(user, password string, salt []byte) string {
	inner := md5.Sum([]byte(password + user))
	h := md5.New()
	h.Write([]byte(hex.EncodeToString(inner[:])))
	h.Write(salt)
	return "md5" + hex.EncodeToString(h.Sum(nil))
}

func (c *Conn) parameterStatus(m []byte) {
	f := strings.Split(string(m), "\x00")
	if len(f) >= 2 {
		c.params[f[0]] = f[1]
	}
}

// Parameter returns a run-time parameter the server reported
// (server_version, standard_conforming_strings, …), or "".
func (c *Conn) Parameter(name string) string { return c.params[name] }

func (c *Conn) send(typ byte, body []byte) error {
	c.w.WriteByte(typ)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(body)+4))
	c.w.Write(n[:])
	c.w.Write(body)
	return c.w.Flush()
}

func (c *Conn) readMessage() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n-4 > maxMessage {
		return 0, nil, fmt.Errorf("%w: message %q of length %d", ErrProtocol, hdr[0], n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(c.r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], body, nil
}

func parseError(m []byte) *Error {
	e := &Error{}
	for len(m) > 0 && m[0] != 0 {
		code := m[0]
		end := 1
		for end < len(m) && m[end] != 0 {
			end++
		}
		val := string(m[1:end])
		if end < len(m) {
			end++
		}
		m = m[end:]
		switch code {
		case 'V':
			e.Severity = val
		case 'S':
			if e.Severity == "" {
				e.Severity = val
			}
		case 'C':
			e.Code = val
		case 'M':
			e.Message = val
		case 'D':
			e.Detail = val
		case 'H':
			e.Hint = val
		}
	}
	return e
}

// Query runs sql (one or more statements, simple query protocol) and returns
// what each statement returned. The first error ends the query; statements
// before it keep their effect unless they ran in one implicit transaction
// (PostgreSQL runs a multi-statement string as one).
func (c *Conn) Query(ctx context.Context, sql string) ([]Result, error) {
	if c.closed {
		return nil, net.ErrClosed
	}
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, errors.New("pgwire: query contains a NUL byte")
	}
	var out []Result
	err := c.withContext(ctx, func() error {
		var err error
		out, err = c.query(sql)
		return err
	})
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) { // the stream is in an unknown state
			c.Close()
		}
		return nil, err
	}
	return out, nil
}

func (c *Conn) query(sql string) ([]Result, error) {
	if err := c.send('Q', append([]byte(sql), 0)); err != nil {
		return nil, err
	}
	var (
		out     []Result
		cur     Result
		qerr    error
		started bool
	)
	for {
		typ, m, err := c.readMessage()
		if err != nil {
			return nil, err
		}
		switch typ {
		case 'T': // RowDescription
			cols, err := parseRowDescription(m)
			if err != nil {
				return nil, err
			}
			cur, started = Result{Columns: cols}, true
		case 'D': // DataRow
			row, err := parseDataRow(m)
			if err != nil {
				return nil, err
			}
			cur.Rows = append(cur.Rows, row)
		case 'C': // CommandComplete
			cur.Tag = strings.TrimRight(string(m), "\x00")
			out = append(out, cur)
			cur, started = Result{}, false
		case 'I': // EmptyQueryResponse
			out = append(out, Result{})
		case 'E':
			qerr = parseError(m)
		case 'G': // CopyInResponse: refuse to send data
			if err := c.send('f', append([]byte("pgwire does not support COPY"), 0)); err != nil {
				return nil, err
			}
		case 'H', 'd', 'c': // COPY OUT: drop the data
		case 'N', 'S', 'A', 'K': // notice, parameter, notification
			if typ == 'S' {
				c.parameterStatus(m)
			}
		case 'Z': // ReadyForQuery
			if started {
				out = append(out, cur)
			}
			if qerr != nil {
				return nil, qerr
			}
			return out, nil
		default:
			return nil, fmt.Errorf("%w: message %q in a query", ErrProtocol, typ)
		}
	}
}

func parseRowDescription(m []byte) ([]string, error) {
	if len(m) < 2 {
		return nil, fmt.Errorf("%w: short RowDescription", ErrProtocol)
	}
	n := int(binary.BigEndian.Uint16(m))
	m = m[2:]
	cols := make([]string, 0, n)
	for range n {
		end := 0
		for end < len(m) && m[end] != 0 {
			end++
		}
		if end+1+18 > len(m) {
			return nil, fmt.Errorf("%w: short RowDescription", ErrProtocol)
		}
		cols = append(cols, string(m[:end]))
		m = m[end+1+18:] // table oid, column, type oid, size, modifier, format
	}
	return cols, nil
}

func parseDataRow(m []byte) ([]string, error) {
	if len(m) < 2 {
		return nil, fmt.Errorf("%w: short DataRow", ErrProtocol)
	}
	n := int(binary.BigEndian.Uint16(m))
	m = m[2:]
	row := make([]string, n)
	for i := range row {
		if len(m) < 4 {
			return nil, fmt.Errorf("%w: short DataRow", ErrProtocol)
		}
		l := int32(binary.BigEndian.Uint32(m))
		m = m[4:]
		if l < 0 { // NULL
			continue
		}
		if int(l) > len(m) {
			return nil, fmt.Errorf("%w: short DataRow", ErrProtocol)
		}
		row[i] = string(m[:l])
		m = m[l:]
	}
	return row, nil
}

// Exec runs sql and discards its rows.
func (c *Conn) Exec(ctx context.Context, sql string) error {
	_, err := c.Query(ctx, sql)
	return err
}

// QueryValue runs a query that returns one row of one column and returns
// that value.
func (c *Conn) QueryValue(ctx context.Context, sql string) (string, error) {
	rs, err := c.Query(ctx, sql)
	if err != nil {
		return "", err
	}
	if len(rs) == 0 || len(rs[len(rs)-1].Rows) != 1 || len(rs[len(rs)-1].Rows[0]) != 1 {
		return "", fmt.Errorf("pgwire: %q did not return exactly one value", sql)
	}
	return rs[len(rs)-1].Rows[0][0], nil
}

// Close ends the session (Terminate) and closes the connection. It is
// idempotent.
func (c *Conn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.nc.SetDeadline(time.Now().Add(time.Second))
	c.send('X', nil)
	return c.nc.Close()
}

// QuoteIdentifier quotes s as an SQL identifier ("fg_1", "a""b").
func QuoteIdentifier(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}

// QuoteLiteral quotes s as an SQL string literal that means s whatever
// standard_conforming_strings says (as libpq's PQescapeLiteral does).
func QuoteLiteral(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `'`, `''`)
	if strings.Contains(s, `\`) {
		return `E'` + strings.ReplaceAll(s, `\`, `\\`) + `'`
	}
	return `'` + s + `'`
}

package pgwire

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBackend is a scripted PostgreSQL server: enough of the backend side of
// the protocol to drive every login path and the query loop of Conn. The
// real-server tests are in package servers; this one reaches the cases a
// local trust-only server cannot (passwords, TLS, bad signatures).
type fakeBackend struct {
	auth     string // trust, password, md5, scram, scram-badsig, scram-nofinal, kerberos, fatal
	password string
	tls      *tls.Config // nil: answer 'N' to SSLRequest
	queries  map[string][]reply

	mu      sync.Mutex
	startup map[string]string // the last startup message's parameters
	sawTLS  bool
}

// reply is one backend message.
type reply struct {
	typ  byte
	body []byte
}

func serve(t *testing.T, b *fakeBackend) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				b.handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return l.Addr().String()
}

func (b *fakeBackend) handle(nc net.Conn) {
	var c net.Conn = nc
	r := bufio.NewReader(c)
	var n uint32
	var body []byte
	for {
		if err := binary.Read(r, binary.BigEndian, &n); err != nil || n < 8 || n > 1<<16 {
			return
		}
		body = make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if binary.BigEndian.Uint32(body) != 80877103 { // not an SSLRequest
			break
		}
		if b.tls == nil {
			c.Write([]byte{'N'})
			continue
		}
		c.Write([]byte{'S'})
		tc := tls.Server(nc, b.tls)
		if err := tc.Handshake(); err != nil {
			return
		}
		b.mu.Lock()
		b.sawTLS = true
		b.mu.Unlock()
		c = tc
		r = bufio.NewReader(c)
	}
	params := map[string]string{}
	f := strings.Split(string(body[4:]), "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		params[f[i]] = f[i+1]
	}
	b.mu.Lock()
	b.startup = params
	b.mu.Unlock()
	w := bufio.NewWriter(c)
	send := func(typ byte, body []byte) {
		w.WriteByte(typ)
		binary.Write(w, binary.BigEndian, uint32(len(body)+4))
		w.Write(body)
		w.Flush()
	}
	auth := func(code uint32, data []byte) { send('R', append(binary.BigEndian.AppendUint32(nil, code), data...)) }
	read := func() (byte, []byte, bool) {
		typ, err := r.ReadByte()
		if err != nil {
			return 0, nil, false
		}
		if err := binary.Read(r, binary.BigEndian, &n); err != nil || n < 4 {
			return 0, nil, false
		}
		m := make([]byte, n-4)
		if _, err := io.ReadFull(r, m); err != nil {
			return 0, nil, false
		}
		return typ, m, true
	}
	fail := func(code, msg string) {
		send('E', []byte("SFATAL\x00VFATAL\x00C"+code+"\x00M"+msg+"\x00\x00"))
	}
	user := params["user"]
	switch b.auth {
	case "trust":
	case "password":
		auth(3, nil)
		if _, m, ok := read(); !ok || string(m) != b.password+"\x00" {
			fail(CodeInvalidPassword, "password authentication failed for user \""+user+"\"")
			return
		}
	case "md5":
		salt := []byte{1, 2, 3, 4}
		auth(5, salt)
		if _, m, ok := read(); !ok || string(m) != md5Password(user, b.password, salt)+"\x00" {
			fail(CodeInvalidPassword, "password authentication failed for user \""+user+"\"")
			return
		}
	case "scram", "scram-badsig", "scram-nofinal":
		auth(10, []byte("SCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00"))
		_, m, ok := read()
		if !ok {
			return
		}
		mech, rest, _ := strings.Cut(string(m), "\x00")
		if mech != "SCRAM-SHA-256" || len(rest) < 4 {
			fail("08P01", "bad mechanism")
			return
		}
		clientFirst := rest[4:]
		if !strings.HasPrefix(clientFirst, "n,,") {
			fail("08P01", "bad gs2 header")
			return
		}
		bare := clientFirst[3:]
		nonce := scramAttrs(bare)["r"] + "SERVERNONCE"
		salt := []byte("saltsalt")
		serverFirst := "r=" + nonce + ",s=" + base64.StdEncoding.EncodeToString(salt) + ",i=4096"
		auth(11, []byte(serverFirst))
		_, m, ok = read()
		if !ok {
			return
		}
		final := string(m)
		i := strings.LastIndex(final, ",p=")
		if i < 0 {
			fail("08P01", "no proof")
			return
		}
		withoutProof, proof64 := final[:i], final[i+3:]
		salted := pbkdf2SHA256([]byte(b.password), salt, 4096)
		storedKey := sha256.Sum256(hmacSHA256(salted, "Client Key"))
		authMsg := bare + "," + serverFirst + "," + withoutProof
		clientSig := hmacSHA256(storedKey[:], authMsg)
		proof, _ := base64.StdEncoding.DecodeString(proof64)
		if len(proof) != len(clientSig) {
			fail(CodeInvalidPassword, "bad proof")
			return
		}
		for i := range proof {
			proof[i] ^= clientSig[i]
		}
		if got := sha256.Sum256(proof); !hmac.Equal(got[:], storedKey[:]) {
			fail(CodeInvalidPassword, "password authentication failed for user \""+user+"\"")
			return
		}
		sig := hmacSHA256(hmacSHA256(salted, "Server Key"), authMsg)
		if b.auth == "scram-badsig" {
			sig[0] ^= 1
		}
		if b.auth != "scram-nofinal" {
			auth(12, []byte("v="+base64.StdEncoding.EncodeToString(sig)))
		}
	case "kerberos":
		auth(2, nil)
		return
	case "fatal":
		fail("3D000", "database \""+params["database"]+"\" does not exist")
		return
	}
	auth(0, nil)
	send('S', []byte("server_version\x0015.0\x00"))
	send('K', make([]byte, 8))
	send('Z', []byte("I"))
	for {
		typ, m, ok := read()
		if !ok || typ == 'X' {
			return
		}
		if typ != 'Q' {
			fail("08P01", "unexpected message")
			return
		}
		q := strings.TrimSuffix(string(m), "\x00")
		rs, ok := b.queries[q]
		if !ok {
			rs = []reply{errorMsg("42601", "syntax error at or near \""+q+"\"")}
		}
		for _, x := range rs {
			if x.typ == 'G' { // CopyInResponse: the client must answer CopyFail
				send('G', x.body)
				if t, _, ok := read(); !ok || t != 'f' {
					return
				}
				send('E', errorMsg("57014", "COPY from stdin failed").body)
				continue
			}
			send(x.typ, x.body)
		}
		send('Z', []byte("I"))
	}
}

func errorMsg(code, msg string) reply {
	return reply{'E', []byte("SERROR\x00VERROR\x00C" + code + "\x00M" + msg + "\x00Dsome detail\x00\x00")}
}

func rowDesc(cols ...string) reply {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		b = append(append(b, c...), 0)
		b = append(b, make([]byte, 18)...)
	}
	return reply{'T', b}
}

// dataRow takes values; nil is NULL.
func dataRow(vals ...*string) reply {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return reply{'D', b}
}

func complete(tag string) reply { return reply{'C', append([]byte(tag), 0)} }

func str(s string) *string { return &s }

// selfSigned writes a CA certificate for 127.0.0.1 and returns the server's
// TLS config and the PEM file's path.
func selfSigned(t *testing.T, names ...string) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fake postgres"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, path
}

var errAny = errors.New("any error")

package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/pgwire"
)

// pgHBA lets postgres in without a password and everyone else only with
// theirs, by a different method each; fg_tls only over TLS.
const pgHBA = `local all all trust
hostssl all fg_tls 127.0.0.1/32 scram-sha-256
hostnossl all fg_tls 127.0.0.1/32 reject
host all fg_clear 127.0.0.1/32 password
host all fg_md5 127.0.0.1/32 md5
host all fg_scram 127.0.0.1/32 scram-sha-256
host all postgres 127.0.0.1/32 trust
`

// pgEnableTLSAndPasswords turns a dedicated server into one that wants
// passwords (roles fg_clear, fg_md5, fg_scram, fg_tls) and offers TLS with a
// self-signed certificate for localhost, whose PEM file it returns.
func pgEnableTLSAndPasswords(t *testing.T, s *Server) string {
	t.Helper()
	k := s.kind.(*pgKind)
	certPEM, keyPEM := selfSignedCert(t, "localhost")
	for name, b := range map[string][]byte{"server.crt": certPEM, "server.key": keyPEM} {
		p := filepath.Join(s.dataDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if k.cred != nil {
			if err := os.Chown(p, k.uid, k.gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	root := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(root, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dataDir(), "pg_hba.conf"), []byte(pgHBA), 0o600); err != nil {
		t.Fatal(err)
	}
	c := pgConn(t, s.DSN())
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	if err := c.Exec(ctx, `
		SET password_encryption = 'scram-sha-256';
		CREATE ROLE fg_scram LOGIN CREATEDB PASSWORD 'pw ''scram''';
		CREATE ROLE fg_clear LOGIN PASSWORD 'pw clear';
		CREATE ROLE fg_tls LOGIN PASSWORD 'pw tls';
		SET password_encryption = 'md5';
		CREATE ROLE fg_md5 LOGIN PASSWORD 'pw md5';`); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "ALTER SYSTEM SET ssl = 'on'"); err != nil { // not in a transaction
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	// The reload is asynchronous: wait until a wrong password is refused and
	// TLS is on.
	eventually(t, 20*time.Second, "pg_hba.conf and ssl reloaded", func() error {
		if v, err := c.QueryValue(ctx, "SHOW ssl"); err != nil || v != "on" {
			return fmt.Errorf("ssl = %q, %v", v, err)
		}
		wrong, err := pgConnect(ctx, "postgres://fg_scram:wrong@"+s.Addr()+"/postgres?sslmode=disable")
		if err == nil {
			wrong.Close()
			return errors.New("a wrong password still logs in")
		}
		var pe *pgwire.Error
		if !errors.As(err, &pe) || pe.Code != pgwire.CodeInvalidPassword {
			return err
		}
		return nil
	})
	return root
}

func selfSignedCert(t *testing.T, dnsName string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: dnsName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:              []string{dnsName},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

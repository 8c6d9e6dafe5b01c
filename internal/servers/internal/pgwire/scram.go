package pgwire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// scramClient is the client side of SCRAM-SHA-256 (RFC 5802, RFC 7677)
// without channel binding ("n,," header). PostgreSQL ignores the user name
// in the SCRAM messages (it has it from the startup message), so it is sent
// empty, as libpq does.
type scramClient struct {
	password    string
	nonce       string
	clientFirst string // client-first-message-bare
	serverSig   []byte // expected ServerSignature, set by final
	verified    bool
}

// newSCRAM starts an exchange; nonce is for tests, "" makes a random one.
func newSCRAM(user, password, nonce string) (*scramClient, error) {
	if nonce == "" {
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		nonce = base64.RawStdEncoding.EncodeToString(b)
	}
	return &scramClient{password: password, nonce: nonce, clientFirst: "n=" + scramName(user) + ",r=" + nonce}, nil
}

// scramName escapes a SCRAM user name (RFC 5802: "=" and "," are special).
func scramName(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "=", "=3D"), ",", "=2C")
}

// first returns the client-first-message.
func (s *scramClient) first() string { return "n,," + s.clientFirst }

// final takes the server-first-message and returns the client-final-message.
func (s *scramClient) final(serverFirst string) (string, error) {
	attrs := scramAttrs(serverFirst)
	nonce, salt64, iters := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, s.nonce) || len(nonce) == len(s.nonce) {
		return "", errors.New("pgwire: SCRAM: the server's nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil || len(salt) == 0 {
		return "", fmt.Errorf("pgwire: SCRAM: bad salt %q", salt64)
	}
	n, err := strconv.Atoi(iters)
	if err != nil || n < 1 || n > 10_000_000 {
		return "", fmt.Errorf("pgwire: SCRAM: bad iteration count %q", iters)
	}
	salted := pbkdf2SHA256([]byte(s.password), salt, n)
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	withoutProof := "c=biws,r=" + nonce // biws: base64 of the "n,," header
	authMsg := s.clientFirst + "," + serverFirst + "," + withoutProof
	clientSig := hmacSHA256(storedKey[:], authMsg)
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ clientSig[i]
	}
	s.serverSig = hmacSHA256(hmacSHA256(salted, "Server Key"), authMsg)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

// verify checks the server-final-message: the server proves it knows the
// password too, so a man in the middle cannot fake a successful login.
func (s *scramClient) verify(serverFinal string) error {
	attrs := scramAttrs(serverFinal)
	if e := attrs["e"]; e != "" {
		return fmt.Errorf("pgwire: SCRAM: server error %q", e)
	}
	sig, err := base64.StdEncoding.DecodeString(attrs["v"])
	if err != nil || s.serverSig == nil || subtle.ConstantTimeCompare(sig, s.serverSig) != 1 {
		return errors.New("pgwire: SCRAM: the server's signature is wrong")
	}
	s.verified = true
	return nil
}

func scramAttrs(msg string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Split(msg, ",") {
		if k, v, ok := strings.Cut(f, "="); ok && len(k) == 1 {
			out[k] = v
		}
	}
	return out
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// pbkdf2SHA256 is PBKDF2-HMAC-SHA-256 (RFC 8018) for one block of output,
// all SCRAM-SHA-256 needs. (crypto/pbkdf2 has it from Go 1.24 on; this keeps
// the module's go line where the rest of the code puts it.)
func pbkdf2SHA256(password, salt []byte, iter int) []byte {
	prf := hmac.New(sha256.New, password)
	prf.Write(salt)
	prf.Write([]byte{0, 0, 0, 1})
	u := prf.Sum(nil)
	out := append([]byte(nil), u...)
	for i := 1; i < iter; i++ {
		prf.Reset()
		prf.Write(u)
		u = prf.Sum(u[:0])
		for j := range out {
			out[j] ^= u[j]
		}
	}
	return out
}

// Package paircred makes and reads the credentials of a session pod and its
// sandbox pod (cluster mode, sandbox pods): a self-signed TLS certificate
// and key the sandbox pod's exec server presents, which the runtime pins
// (it trusts that one certificate, no authority), and a bearer token the
// runtime shows the server on every connection. The operator makes one set
// per pair into the pair's Secret; nothing else holds them.
package paircred

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Keys of the pair's Secret.
const (
	KeyCert  = "tls.crt"
	KeyKey   = "tls.key"
	KeyToken = "token"
)

// Environment of the two sides.
const (
	// EnvCert and EnvToken give the runtime the certificate it pins and
	// the token it shows; the sandbox pod's server gets EnvCert, EnvKey
	// and EnvToken.
	EnvCert  = "PICOBOT_SANDBOX_CERT"
	EnvKey   = "PICOBOT_SANDBOX_KEY"
	EnvToken = "PICOBOT_SANDBOX_TOKEN"
	// EnvPair names the pair (the sandbox pod, its Secret and the
	// ConfigMap that holds its address) in the runtime's environment.
	EnvPair = "PICOBOT_SANDBOX_PAIR"
	// KeyAddress is the address ConfigMap's key: host:port of the
	// sandbox pod's exec server.
	KeyAddress = "address"
)

// Credentials are one pair's.
type Credentials struct {
	CertPEM []byte
	KeyPEM  []byte
	Token   string
}

// lifetime of a certificate: a pair lives as long as its session pod, far
// less than this; the runtime pins the certificate, so expiry is no
// revocation mechanism here.
const lifetime = 10 * 365 * 24 * time.Hour

// Generate makes a pair's credentials: an ECDSA P-256 key, a self-signed
// certificate for name issued at now, and a 256-bit token.
func Generate(name string, now time.Time) (Credentials, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Credentials{}, fmt.Errorf("failed to generate the key of sandbox pair %q: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Credentials{}, fmt.Errorf("failed to generate a serial number for sandbox pair %q: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Credentials{}, fmt.Errorf("failed to create the certificate of sandbox pair %q: %w", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Credentials{}, fmt.Errorf("failed to encode the key of sandbox pair %q: %w", name, err)
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return Credentials{}, fmt.Errorf("failed to generate the token of sandbox pair %q: %w", name, err)
	}
	return Credentials{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		Token:   base64.RawURLEncoding.EncodeToString(tok),
	}, nil
}

// CertDER is the DER of the one certificate in certPEM: what the runtime
// pins.
func CertDER(certPEM []byte) ([]byte, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("failed to read the sandbox pod's certificate: no PEM CERTIFICATE block")
	}
	if _, err := x509.ParseCertificate(b.Bytes); err != nil {
		return nil, fmt.Errorf("failed to read the sandbox pod's certificate: %w", err)
	}
	return b.Bytes, nil
}

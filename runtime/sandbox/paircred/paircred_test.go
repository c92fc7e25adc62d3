package paircred

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestGenerate(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	a, err := Generate("helper-abcde-sandbox", now)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := Generate("helper-abcde-sandbox", now)
	g.Expect(err).NotTo(HaveOccurred())

	pair, err := tls.X509KeyPair(a.CertPEM, a.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred(), "the key belongs to the certificate")
	g.Expect(pair.Certificate).To(HaveLen(1))
	der, err := CertDER(a.CertPEM)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(der).To(Equal(pair.Certificate[0]))
	cert, err := x509.ParseCertificate(der)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.Subject.CommonName).To(Equal("helper-abcde-sandbox"))
	g.Expect(cert.NotBefore.Before(now)).To(BeTrue())
	g.Expect(cert.ExtKeyUsage).To(ConsistOf(x509.ExtKeyUsageServerAuth))

	g.Expect(len(a.Token)).To(BeNumerically(">=", 43), "256 bits")
	g.Expect(a.Token).NotTo(Equal(b.Token))
	g.Expect(a.CertPEM).NotTo(Equal(b.CertPEM))

	_, err = CertDER([]byte("not a certificate"))
	g.Expect(err).To(MatchError("failed to read the sandbox pod's certificate: no PEM CERTIFICATE block"))
	_, err = CertDER(a.KeyPEM)
	g.Expect(err).To(HaveOccurred())
}

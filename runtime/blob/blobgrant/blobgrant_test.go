package blobgrant_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/md5" //nolint:gosec // S3's Content-MD5
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/blobgrant"
	"github.com/picobot/picobot/runtime/blob/remoteblob"
	"github.com/picobot/picobot/runtime/blob/s3blob"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// The tests run the grant service against the real kube-apiserver (its
// TokenReview) and an S3 server that checks signatures (versitygw), with
// tokens the API server issued (TokenRequest) to ServiceAccounts of two
// tenant namespaces.
var (
	cs      kubernetes.Interface
	kubeCfg *rest.Config // the API server's, for clients of their own
	saKey   string       // the API server's ServiceAccount signing key
	bucket  *s3blob.Store
	grants  string // the grant service's URL
	skipped string
)

const (
	tenantA = "blob-tenant-a"
	tenantB = "blob-tenant-b"
	// sessionSA is a session pod's ServiceAccount (picobot-agent-<agent>).
	sessionSA = "picobot-agent-bot"
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	env, err := controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipped = reason
		return m.Run()
	}
	defer func() { _ = env.Stop() }()
	endpoint, stop, err := services.S3Signing()
	if err != nil {
		reason, fatal := services.Unavailable("an S3 server that checks signatures", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipped = reason
		return m.Run()
	}
	defer stop()
	if err := setUp(env, endpoint); err != nil {
		fmt.Fprintln(os.Stderr, "set-up failed:", err)
		return 1
	}
	srv := httptest.NewServer(must(blobgrant.New(blobgrant.Config{Reviews: cs.AuthenticationV1().TokenReviews(), Blobs: bucket})))
	defer srv.Close()
	grants = srv.URL
	return m.Run()
}

func setUp(env *controlplane.Environment, endpoint string) error {
	ctx := context.Background()
	kubeCfg = env.Config
	cs = kubernetes.NewForConfigOrDie(env.Config)
	saKey = filepath.Join(env.ControlPlane.APIServer.CertDir, "sa-signer.key")
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	key := u.User.Username()
	secret, _ := u.User.Password()
	u.User = nil
	if bucket, err = s3blob.New(ctx, s3blob.Config{Bucket: "picobot-grants", Endpoint: u.String(), UsePathStyle: true,
		AccessKeyID: key, SecretAccessKey: secret}); err != nil {
		return err
	}
	if err := bucket.EnsureBucket(ctx); err != nil {
		return err
	}
	for _, ns := range []string{tenantA, tenantB} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		for _, sa := range []string{sessionSA, "other-app"} {
			if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func needServers(t *testing.T) {
	if skipped != "" {
		t.Skip(skipped)
	}
}

// token asks the API server for a token of ServiceAccount ns/sa, as the
// kubelet does for a projected volume.
func token(t *testing.T, ns, sa string, audiences ...string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

// store is a session pod's store: the token in a file, as the projected
// volume holds it.
func store(t *testing.T, tok string) *remoteblob.Store {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	NewWithT(t).Expect(os.WriteFile(f, []byte(tok), 0o600)).To(Succeed())
	s, err := remoteblob.New(remoteblob.Config{URL: grants, TokenFile: f})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ask sends a grant request with tok and returns the status and the body.
func ask(t *testing.T, tok string, req remoteblob.GrantRequest) (int, []byte) {
	t.Helper()
	return askAt(t, grants, tok, req)
}

// askAt is ask to the grant service at base.
func askAt(t *testing.T, base, tok string, req remoteblob.GrantRequest) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(req)
	return callAt(t, base, tok, http.MethodPost, remoteblob.PathGrant, body)
}

func call(t *testing.T, tok, method, path string, body []byte) (int, []byte) {
	t.Helper()
	return callAt(t, grants, tok, method, path, body)
}

func callAt(t *testing.T, base, tok, method, path string, body []byte) (int, []byte) {
	t.Helper()
	r, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(r)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// s3CodeRE finds the code of an S3 error document.
var s3CodeRE = regexp.MustCompile(`<Code>([^<]+)</Code>`)

// message is the error of a refusal.
func message(body []byte) string {
	var e remoteblob.ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil {
		return string(body)
	}
	return e.Error
}

func grantOf(t *testing.T, tok string, req remoteblob.GrantRequest) remoteblob.Grant {
	t.Helper()
	return grantAt(t, grants, tok, req)
}

// grantAt is grantOf from the grant service at base.
func grantAt(t *testing.T, base, tok string, req remoteblob.GrantRequest) remoteblob.Grant {
	t.Helper()
	code, body := askAt(t, base, tok, req)
	NewWithT(t).Expect(code).To(Equal(http.StatusOK), "%s", body)
	var g remoteblob.Grant
	NewWithT(t).Expect(json.Unmarshal(body, &g)).To(Succeed())
	return g
}

// send sends a (possibly altered) granted request straight to S3.
func send(t *testing.T, method, rawURL string, header http.Header, body []byte) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, rawURL, bytes.NewReader(body))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for k, v := range header {
		if !strings.EqualFold(k, "Content-Length") {
			r.Header[k] = v
		}
	}
	resp, err := http.DefaultClient.Do(r)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func putGrant(key string, content []byte, contentType string) remoteblob.GrantRequest {
	sum := md5Sum(content)
	return remoteblob.GrantRequest{Op: remoteblob.OpPut, Key: key, Size: int64(len(content)),
		ContentMD5: base64.StdEncoding.EncodeToString(sum), ContentType: contentType}
}

// TestTenantUsesItsPrefix: a session pod's store, with tenant A's real
// projected token, does everything the blob interface offers under A's
// prefix, and sees only A's objects.
func TestTenantUsesItsPrefix(t *testing.T) {
	needServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	a := store(t, token(t, tenantA, sessionSA, remoteblob.Audience))
	b := store(t, token(t, tenantB, sessionSA, remoteblob.Audience))

	key := "tenants/" + tenantA + "/artifacts/01/report.md"
	obj, err := a.Put(ctx, key, strings.NewReader("# report"), -1, blob.PutOptions{ContentType: "text/markdown", Metadata: map[string]string{"Session": "web:1:1"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(obj.Size).To(Equal(int64(8)))
	g.Expect(obj.ETag).NotTo(BeEmpty())

	rc, got, err := a.Get(ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	g.Expect(string(data)).To(Equal("# report"))
	g.Expect(got.ContentType).To(Equal("text/markdown"))
	g.Expect(got.Metadata).To(Equal(map[string]string{"session": "web:1:1"}))
	g.Expect(got.ETag).To(Equal(obj.ETag))

	head, err := a.Head(ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(head.Size).To(Equal(int64(8)))

	empty := "tenants/" + tenantA + "/artifacts/02/empty"
	_, err = a.Put(ctx, empty, bytes.NewReader(nil), 0, blob.PutOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = b.Put(ctx, "tenants/"+tenantB+"/artifacts/03/b.txt", strings.NewReader("b's"), 3, blob.PutOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	list, err := a.List(ctx, "tenants/"+tenantA+"/", 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys(list)).To(Equal([]string{key, empty}))
	list, err = a.List(ctx, "tenants/"+tenantA+"/", 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys(list)).To(Equal([]string{key}))

	g.Expect(a.Delete(ctx, key)).To(Succeed())
	g.Expect(a.Delete(ctx, key)).To(Succeed(), "deleting a missing key is no error")
	_, _, err = a.Get(ctx, key)
	g.Expect(err).To(MatchError(blob.ErrNotFound))
	_, err = a.Head(ctx, key)
	g.Expect(err).To(MatchError(blob.ErrNotFound))

	// Size and option errors keep their blob sentinels.
	_, err = a.Put(ctx, "tenants/"+tenantA+"/x", strings.NewReader("abc"), 5, blob.PutOptions{})
	g.Expect(err).To(MatchError(blob.ErrSizeMismatch))
	_, err = a.Put(ctx, "tenants/"+tenantA+"/../x", strings.NewReader("abc"), 3, blob.PutOptions{})
	g.Expect(err).To(MatchError(blob.ErrInvalidKey))
}

func keys(objs []blob.Object) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// TestOtherPrefixesRefused: with A's real token, every key or prefix that
// is not A's is refused by the service, whatever the spelling.
func TestOtherPrefixesRefused(t *testing.T) {
	needServers(t)
	tok := token(t, tenantA, sessionSA, remoteblob.Audience)
	for _, tc := range []struct {
		key  string
		code int
		msg  string
	}{
		{"tenants/" + tenantB + "/artifacts/x", http.StatusForbidden, "outside the prefix"},
		{"tenants/" + tenantA + "b/x", http.StatusForbidden, "outside the prefix"}, // a tenant whose name starts with A's
		{"tenants/x", http.StatusForbidden, "outside the prefix"},
		{"other/" + tenantA + "/x", http.StatusForbidden, "outside the prefix"},
		{"tenants/" + tenantA + "/../" + tenantB + "/x", http.StatusBadRequest, `".." segment`},
		{"tenants/" + tenantA + "/./x", http.StatusBadRequest, `"." segment`},
		{"/tenants/" + tenantA + "/x", http.StatusBadRequest, "absolute"},
		{"tenants//" + tenantA + "/x", http.StatusBadRequest, "empty segment"},
		{`tenants\` + tenantB + `\x`, http.StatusBadRequest, "backslash"},
		{"tenants/" + tenantA + "/x\x00", http.StatusBadRequest, "NUL"},
		{"", http.StatusBadRequest, "empty"},
	} {
		for _, op := range []remoteblob.Op{remoteblob.OpGet, remoteblob.OpHead, remoteblob.OpDelete, remoteblob.OpPut} {
			t.Run(string(op)+" "+tc.key, func(t *testing.T) {
				req := remoteblob.GrantRequest{Op: op, Key: tc.key}
				if op == remoteblob.OpPut {
					req = putGrant(tc.key, []byte("x"), "text/plain")
				}
				code, body := ask(t, tok, req)
				NewWithT(t).Expect(code).To(Equal(tc.code), "%s", body)
				NewWithT(t).Expect(message(body)).To(ContainSubstring(tc.msg))
			})
		}
	}
	for _, prefix := range []string{"", "tenants/", "tenants/" + tenantB + "/", "tenants/" + tenantA, "tenants/" + tenantA + "/../"} {
		t.Run("list "+prefix, func(t *testing.T) {
			code, body := call(t, tok, http.MethodGet, remoteblob.PathList+"?prefix="+url.QueryEscape(prefix), nil)
			NewWithT(t).Expect(code).To(BeElementOf(http.StatusForbidden, http.StatusBadRequest), "%s", body)
		})
	}
	// Through the store, the refusal is an error naming the reason.
	_, _, err := store(t, tok).Get(context.Background(), "tenants/"+tenantB+"/artifacts/x")
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("refused (403)")))
}

// TestEncodedSlashStaysInThePrefix: an escaped "../" is part of the key's
// name, not a way up: the object lands under A's prefix, byte for byte.
func TestEncodedSlashStaysInThePrefix(t *testing.T) {
	needServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	a := store(t, token(t, tenantA, sessionSA, remoteblob.Audience))
	key := "tenants/" + tenantA + "/..%2F" + tenantB + "%2Fescape"
	_, err := a.Put(ctx, key, strings.NewReader("x"), 1, blob.PutOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := bucket.List(ctx, "tenants/"+tenantA+"/..", 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys(objs)).To(Equal([]string{key}))
	objs, err = bucket.List(ctx, "tenants/"+tenantB+"/escape", 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(BeEmpty())
}

// TestTokensRefused: only a valid token of the service's audience, of a
// session pod's ServiceAccount, gets anything.
func TestTokensRefused(t *testing.T) {
	needServers(t)
	key := "tenants/" + tenantA + "/x"
	valid := token(t, tenantA, sessionSA, remoteblob.Audience)
	for _, tc := range []struct {
		name  string
		token string
		code  int
		msg   string
	}{
		{"no token", "", http.StatusUnauthorized, "token of audience"},
		{"garbage", "not-a-jwt", http.StatusUnauthorized, "not a valid token"},
		{"API server audience", token(t, tenantA, sessionSA), http.StatusUnauthorized, "not a valid token"},
		{"other audience", token(t, tenantA, sessionSA, "vault"), http.StatusUnauthorized, "not a valid token"},
		{"expired", expired(t, valid), http.StatusUnauthorized, "not a valid token"},
		{"altered signature", valid[:len(valid)-4] + "AAAA", http.StatusUnauthorized, "not a valid token"},
		{"another ServiceAccount of the namespace", token(t, tenantA, "other-app", remoteblob.Audience), http.StatusForbidden, "not a session pod's"},
		{"the namespace's default ServiceAccount", defaultToken(t), http.StatusForbidden, "not a session pod's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ask(t, tc.token, remoteblob.GrantRequest{Op: remoteblob.OpGet, Key: key})
			NewWithT(t).Expect(code).To(Equal(tc.code), "%s", body)
			NewWithT(t).Expect(message(body)).To(ContainSubstring(tc.msg))
			code, _ = call(t, tc.token, http.MethodGet, remoteblob.PathList+"?prefix=tenants/"+tenantA+"/", nil)
			NewWithT(t).Expect(code).To(Equal(tc.code))
		})
	}
	t.Run("deleted ServiceAccount", func(t *testing.T) {
		ctx := context.Background()
		_, err := cs.CoreV1().ServiceAccounts(tenantA).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "picobot-agent-gone"}}, metav1.CreateOptions{})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		tok := token(t, tenantA, "picobot-agent-gone", remoteblob.Audience)
		NewWithT(t).Expect(cs.CoreV1().ServiceAccounts(tenantA).Delete(ctx, "picobot-agent-gone", metav1.DeleteOptions{})).To(Succeed())
		// The API server looks ServiceAccounts up through its own cache: a
		// TokenReview may pass for a moment after the delete. The service's
		// first question waits until the API server says no (it would keep
		// a yes for its cache TTL).
		NewWithT(t).Eventually(func() bool {
			r, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
				Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{remoteblob.Audience}}}, metav1.CreateOptions{})
			return err == nil && !r.Status.Authenticated
		}).WithTimeout(30 * time.Second).Should(BeTrue())
		code, body := ask(t, tok, remoteblob.GrantRequest{Op: remoteblob.OpGet, Key: key})
		NewWithT(t).Expect(code).To(Equal(http.StatusUnauthorized), "%s", body)
	})
}

func defaultToken(t *testing.T) string {
	ctx := context.Background()
	// No kube-controller-manager here to make it.
	_, err := cs.CoreV1().ServiceAccounts(tenantB).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	return token(t, tenantB, "default", remoteblob.Audience)
}

// expired re-signs tok's claims (same issuer, subject, ServiceAccount uid)
// with the API server's own signing key, its validity moved an hour into
// the past: a token that was real and has expired.
func expired(t *testing.T, tok string) string {
	t.Helper()
	past := time.Now().Add(-2 * time.Hour)
	forged := resign(t, tok, past, past.Add(10*time.Minute))
	// The same claims with a current validity are accepted: what is
	// refused is the expiry, not the signature.
	code, body := ask(t, resign(t, tok, time.Now(), time.Now().Add(10*time.Minute)), remoteblob.GrantRequest{Op: remoteblob.OpGet, Key: "tenants/" + tenantA + "/x"})
	NewWithT(t).Expect(code).To(Equal(http.StatusOK), "the re-signed current token: %s", body)
	return forged
}

// resign re-signs tok's claims with the API server's own signing key,
// valid from issued to expires (whole seconds).
func resign(t *testing.T, tok string, issued, expires time.Time) string {
	t.Helper()
	g := NewWithT(t)
	parts := strings.Split(tok, ".")
	g.Expect(parts).To(HaveLen(3))
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	g.Expect(err).NotTo(HaveOccurred())
	var claims map[string]any
	g.Expect(json.Unmarshal(raw, &claims)).To(Succeed())
	claims["iat"], claims["nbf"], claims["exp"] = issued.Unix(), issued.Unix(), expires.Unix()
	payload, _ := json.Marshal(claims)
	return sign(t, parts[0]+"."+base64.RawURLEncoding.EncodeToString(payload))
}

// sign signs a JWT's header and payload with the API server's
// ServiceAccount key (ES256 or RS256, whichever envtest made).
func sign(t *testing.T, signing string) string {
	t.Helper()
	g := NewWithT(t)
	pemBytes, err := os.ReadFile(saKey)
	g.Expect(err).NotTo(HaveOccurred())
	block, _ := pem.Decode(pemBytes)
	g.Expect(block).NotTo(BeNil())
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		}
	}
	g.Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256([]byte(signing))
	var sig []byte
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		g.Expect(err).NotTo(HaveOccurred())
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	case *rsa.PrivateKey:
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
		g.Expect(err).NotTo(HaveOccurred())
	default:
		t.Fatalf("unexpected key type %T", key)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestGrantsAreForOneRequest: S3's signature check makes a grant good for
// its own method, key, content and time only.
func TestGrantsAreForOneRequest(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	tok := token(t, tenantA, sessionSA, remoteblob.Audience)
	bKey := "tenants/" + tenantB + "/artifacts/victim.txt"
	_, err := bucket.Put(ctx, bKey, strings.NewReader("b's data"), -1, blob.PutOptions{ContentType: "text/plain"})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	content := []byte("a's data")
	aKey := "tenants/" + tenantA + "/artifacts/mine.txt"
	put := grantOf(t, tok, putGrant(aKey, content, "text/plain"))
	get := grantOf(t, tok, remoteblob.GrantRequest{Op: remoteblob.OpGet, Key: aKey})
	otherKey := func(raw string) string {
		u, err := url.Parse(raw)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		u.Path = strings.Replace(u.Path, aKey, bKey, 1)
		u.RawPath = ""
		return u.String()
	}
	for _, tc := range []struct {
		name   string
		method string
		url    string
		header func() http.Header
		body   []byte
	}{
		{"put URL for B's key", put.Method, otherKey(put.URL), put.Header.Clone, content},
		{"put URL for another key of A", put.Method, strings.Replace(put.URL, "mine.txt", "other.txt", 1), put.Header.Clone, content},
		{"put URL with other content", put.Method, put.URL, put.Header.Clone, []byte("b's data")},
		{"put URL with another content type", put.Method, put.URL, func() http.Header {
			h := put.Header.Clone()
			h.Set("Content-Type", "text/html")
			return h
		}, content},
		{"get URL for B's key", get.Method, otherKey(get.URL), http.Header{}.Clone, nil},
		{"get URL used to delete", http.MethodDelete, get.URL, http.Header{}.Clone, nil},
		{"get URL used to put", http.MethodPut, get.URL, http.Header{}.Clone, content},
		{"get URL with another signature", get.Method, strings.Replace(get.URL, "X-Amz-Signature=", "X-Amz-Signature=0", 1), http.Header{}.Clone, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(t, tc.method, tc.url, tc.header(), tc.body)
			s3code := s3CodeRE.FindStringSubmatch(body)
			NewWithT(t).Expect(s3code).To(HaveLen(2), "S3 answered %d: %s", code, body)
			t.Logf("S3 answered %d %s", code, s3code[1])
			NewWithT(t).Expect(code).To(BeElementOf(http.StatusForbidden, http.StatusBadRequest))
			NewWithT(t).Expect(s3code[1]).To(BeElementOf("SignatureDoesNotMatch", "BadDigest", "AccessDenied"))
		})
	}
	// B's object is untouched, and the grants work as given.
	rc, _, err := bucket.Get(ctx, bKey)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	b, _ := io.ReadAll(rc)
	_ = rc.Close()
	NewWithT(t).Expect(string(b)).To(Equal("b's data"))
	code, body := send(t, put.Method, put.URL, put.Header, content)
	NewWithT(t).Expect(code).To(Equal(http.StatusOK), "%s", body)
	code, body = send(t, get.Method, get.URL, nil, nil)
	NewWithT(t).Expect(code).To(Equal(http.StatusOK), "%s", body)
	NewWithT(t).Expect(body).To(Equal("a's data"))
}

// TestExpiredGrantRefused: S3 refuses a grant once its TTL has passed.
func TestExpiredGrantRefused(t *testing.T) {
	needServers(t)
	srv := httptest.NewServer(must(blobgrant.New(blobgrant.Config{Reviews: cs.AuthenticationV1().TokenReviews(), Blobs: bucket, TTL: time.Second})))
	defer srv.Close()
	tok := token(t, tenantA, sessionSA, remoteblob.Audience)
	key := "tenants/" + tenantA + "/kept"
	_, err := bucket.Put(context.Background(), key, strings.NewReader("x"), 1, blob.PutOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	g := grantAt(t, srv.URL, tok, remoteblob.GrantRequest{Op: remoteblob.OpGet, Key: key})
	// SigV4 counts whole seconds from X-Amz-Date: wait until they have passed.
	time.Sleep(time.Until(g.Expires) + 1500*time.Millisecond)
	code, msg := send(t, g.Method, g.URL, nil, nil)
	NewWithT(t).Expect(code).To(Equal(http.StatusForbidden), "%s", msg)
	NewWithT(t).Expect(s3CodeRE.FindStringSubmatch(msg)).To(HaveLen(2), "%s", msg)
	t.Logf("S3 answered %d %s", code, s3CodeRE.FindStringSubmatch(msg)[1])
}

// TestBadRequests: malformed grant requests get a clear error.
func TestBadRequests(t *testing.T) {
	needServers(t)
	tok := token(t, tenantA, sessionSA, remoteblob.Audience)
	key := "tenants/" + tenantA + "/x"
	for _, tc := range []struct {
		name string
		body string
		msg  string
	}{
		{"not JSON", "{", "invalid grant request"},
		{"unknown field", `{"op":"get","key":"` + key + `","bucket":"other"}`, "unknown field"},
		{"unknown op", `{"op":"copy","key":"` + key + `"}`, "unknown operation"},
		{"put without MD5", `{"op":"put","key":"` + key + `","size":1}`, "MD5"},
		{"put of unknown size", `{"op":"put","key":"` + key + `","size":-1,"contentMD5":"` + base64.StdEncoding.EncodeToString(md5Sum(nil)) + `"}`, "not known"},
		{"put too large", `{"op":"put","key":"` + key + `","size":6000000000,"contentMD5":"` + base64.StdEncoding.EncodeToString(md5Sum(nil)) + `"}`, "too large"},
		{"metadata on a get", `{"op":"get","key":"` + key + `","metadata":{"a":"b"}}`, "belong to a put"},
		{"bad metadata key", `{"op":"put","key":"` + key + `","size":1,"contentMD5":"` + base64.StdEncoding.EncodeToString(md5Sum([]byte("x"))) + `","metadata":{"a_b":"c"}}`, "metadata key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, tok, http.MethodPost, remoteblob.PathGrant, []byte(tc.body))
			NewWithT(t).Expect(code).To(BeElementOf(http.StatusBadRequest, http.StatusRequestEntityTooLarge), "%s", body)
			NewWithT(t).Expect(strings.ToLower(message(body))).To(ContainSubstring(strings.ToLower(tc.msg)))
		})
	}
	code, _ := call(t, tok, http.MethodGet, remoteblob.PathList+"?prefix=tenants/"+tenantA+"/&limit=-1", nil)
	NewWithT(t).Expect(code).To(Equal(http.StatusBadRequest))
	code, _ = call(t, tok, http.MethodGet, remoteblob.PathGrant, nil)
	NewWithT(t).Expect(code).To(Equal(http.StatusMethodNotAllowed))
}

func md5Sum(b []byte) []byte {
	sum := md5.Sum(b) //nolint:gosec // S3's Content-MD5
	return sum[:]
}

// BenchmarkPut compares a 4 KiB Put of a session pod through a grant (a
// TokenReview, a presign, the PUT) with the same Put straight to S3 with
// credentials, on the same servers.
func BenchmarkPut(b *testing.B) {
	if skipped != "" {
		b.Skip(skipped)
	}
	content := bytes.Repeat([]byte("x"), 4<<10)
	tr, err := cs.CoreV1().ServiceAccounts(tenantA).CreateToken(context.Background(), sessionSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{remoteblob.Audience}, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(f, []byte(tr.Status.Token), 0o600); err != nil {
		b.Fatal(err)
	}
	granted, err := remoteblob.New(remoteblob.Config{URL: grants, TokenFile: f})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = granted.Close() }()
	for name, s := range map[string]blob.Store{"direct": bucket, "granted": granted} {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("tenants/%s/bench/%d", tenantA, i%100)
				if _, err := s.Put(context.Background(), key, bytes.NewReader(content), int64(len(content)), blob.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

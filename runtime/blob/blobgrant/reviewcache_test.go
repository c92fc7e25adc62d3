package blobgrant_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/picobot/picobot/runtime/blob/blobgrant"
	"github.com/picobot/picobot/runtime/blob/remoteblob"
)

// reviewCounter counts the TokenReviews a client sends to the real API
// server: it wraps the client's transport and passes every request on.
type reviewCounter struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *reviewCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// countedService starts a grant service configured by cfg (its reviewer
// and store filled in) whose TokenReviews are counted.
func countedService(tb testing.TB, cfg blobgrant.Config) (string, *reviewCounter) {
	tb.Helper()
	counter := &reviewCounter{}
	rc := rest.CopyConfig(kubeCfg)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	})
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Reviews, cfg.Blobs = client.AuthenticationV1().TokenReviews(), bucket
	srv := httptest.NewServer(must(blobgrant.New(cfg)))
	tb.Cleanup(srv.Close)
	return srv.URL, counter
}

var getA = remoteblob.GrantRequest{Op: remoteblob.OpGet, Key: "tenants/" + tenantA + "/cached"}

// TestReviewsAreCached: a pod's burst of grants costs one TokenReview;
// another token costs its own; once the cache's TTL has passed, the token
// is reviewed again.
func TestReviewsAreCached(t *testing.T) {
	needServers(t)
	g := NewWithT(t)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	base, reviews := countedService(t, blobgrant.Config{Clock: clk})
	tok := token(t, tenantA, sessionSA, remoteblob.Audience)

	for range 20 {
		grantAt(t, base, tok, getA)
	}
	code, body := callAt(t, base, tok, http.MethodGet, remoteblob.PathList+"?prefix=tenants/"+tenantA+"/", nil)
	g.Expect(code).To(Equal(http.StatusOK), "%s", body)
	g.Expect(reviews.n.Load()).To(Equal(int64(1)), "20 grants and a list with one token")

	grantAt(t, base, token(t, tenantA, sessionSA, remoteblob.Audience), getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(2)), "a second token is reviewed on its own")

	clk.SetTime(clk.Now().Add(blobgrant.DefaultCacheTTL - time.Second))
	grantAt(t, base, tok, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(2)), "within the TTL")

	clk.SetTime(clk.Now().Add(2 * time.Second))
	grantAt(t, base, tok, getA)
	grantAt(t, base, tok, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(3)), "past the TTL: one new review, kept again")
}

// TestCacheIsBounded: past CacheSize tokens, the least recently used one
// is dropped and costs a review again.
func TestCacheIsBounded(t *testing.T) {
	needServers(t)
	g := NewWithT(t)
	base, reviews := countedService(t, blobgrant.Config{CacheSize: 2})
	first, second, third := token(t, tenantA, sessionSA, remoteblob.Audience), token(t, tenantA, sessionSA, remoteblob.Audience), token(t, tenantA, sessionSA, remoteblob.Audience)
	for _, tok := range []string{first, second, first, third} {
		grantAt(t, base, tok, getA)
	}
	g.Expect(reviews.n.Load()).To(Equal(int64(3)), "first was used again before third came")
	grantAt(t, base, first, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(3)), "first is kept")
	grantAt(t, base, second, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(4)), "second, the least recently used, was dropped")
}

// TestCacheNeverOutlivesTheToken: a token that expires before the cache's
// TTL is kept only until its exp claim.
func TestCacheNeverOutlivesTheToken(t *testing.T) {
	needServers(t)
	g := NewWithT(t)
	now := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakePassiveClock(now)
	base, reviews := countedService(t, blobgrant.Config{Clock: clk})
	// A real token's claims, re-signed by the API server's key to expire
	// in 20 s (TokenRequest gives no less than 10 minutes).
	tok := resign(t, token(t, tenantA, sessionSA, remoteblob.Audience), now, now.Add(20*time.Second))

	grantAt(t, base, tok, getA)
	clk.SetTime(now.Add(19 * time.Second))
	grantAt(t, base, tok, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(1)))

	// Past exp (and well within the 30 s TTL): asked again. The API server
	// answers by its own clock, so only the count is checked.
	clk.SetTime(now.Add(21 * time.Second))
	_, _ = askAt(t, base, tok, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(2)))
}

// TestRevokedTokenRefusedOnceTheTTLPassed: a token bound to a session pod
// works while the pod lives; once the pod is deleted, the service refuses
// it as soon as the cached review is older than the TTL (and the API
// server's own token cache, 10 s of real time, has let go of it too).
// Refusals are not cached: each one is a review.
func TestRevokedTokenRefusedOnceTheTTLPassed(t *testing.T) {
	needServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	base, reviews := countedService(t, blobgrant.Config{Clock: clk})

	pod, err := cs.CoreV1().Pods(tenantA).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "session-revoked"},
		Spec: corev1.PodSpec{ServiceAccountName: sessionSA, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "runtime", Image: "local/picobot:test"}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts(tenantA).CreateToken(ctx, sessionSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{remoteblob.Audience}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tok := tr.Status.Token

	grantAt(t, base, tok, getA)
	g.Expect(cs.CoreV1().Pods(tenantA).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
	// Within the TTL the cached review still grants: the price of the cache.
	grantAt(t, base, tok, getA)
	g.Expect(reviews.n.Load()).To(Equal(int64(1)))

	// Past the TTL each try is reviewed; the API server refuses the token
	// once its own cache lets go (it keeps a success for 10 s).
	var code int
	var body []byte
	g.Eventually(func() int {
		clk.SetTime(clk.Now().Add(blobgrant.DefaultCacheTTL + time.Second))
		code, body = askAt(t, base, tok, getA)
		return code
	}, 30*time.Second, time.Second).Should(Equal(http.StatusUnauthorized))
	g.Expect(message(body)).To(ContainSubstring("not a valid token"))
	refused := reviews.n.Load()
	g.Expect(refused).To(BeNumerically(">=", 2))

	code, _ = askAt(t, base, tok, getA)
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	g.Expect(reviews.n.Load()).To(Equal(refused+1), "a refusal is not cached")
}

// BenchmarkGrant measures grants per second of one pod's token through
// the service over HTTP, with the review cache and without it (a
// TokenReview per grant), against the real API server.
func BenchmarkGrant(b *testing.B) {
	if skipped != "" {
		b.Skip(skipped)
	}
	tr, err := cs.CoreV1().ServiceAccounts(tenantA).CreateToken(context.Background(), sessionSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{remoteblob.Audience}, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	tok := tr.Status.Token
	for _, tc := range []struct {
		name     string
		cacheTTL time.Duration
	}{{"cached", 0}, {"uncached", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			base, reviews := countedService(b, blobgrant.Config{CacheTTL: tc.cacheTTL})
			body := strings.NewReader(`{"op":"get","key":"tenants/` + tenantA + `/bench"}`)
			for b.Loop() {
				_, _ = body.Seek(0, 0)
				r, _ := http.NewRequest(http.MethodPost, base+remoteblob.PathGrant, body)
				r.Header.Set("Authorization", "Bearer "+tok)
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body) // so the connection is reused
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("grant: %s", resp.Status)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grants/s")
			b.ReportMetric(float64(reviews.n.Load())/float64(b.N), "reviews/grant")
		})
	}
}

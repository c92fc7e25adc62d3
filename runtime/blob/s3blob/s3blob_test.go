package s3blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/blob/blobtest"
	"github.com/picobot/picobot/test/services"
)

// The S3-protocol server every integration test of the package shares: a real
// server process over HTTP, each test in a bucket of its own.
var (
	s3Endpoint  string
	s3AccessKey = "picobot"
	s3SecretKey = "picobot-secret"
	skipReason  string
	// quirks are the known defects of the server: gofakes3's when it is
	// gofakes3 (started by the tests or named by PICOBOT_TEST_S3_URL), none
	// for a real server.
	quirks []blobtest.Option
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	endpoint, stop, err := services.S3()
	if err != nil {
		reason, fatal := services.Unavailable("S3 server", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipReason = reason
	} else {
		defer stop()
		u, err := url.Parse(endpoint)
		if err != nil {
			fmt.Fprintf(os.Stderr, "failed to parse S3 endpoint %q: %v\n", endpoint, err)
			return 1
		}
		if u.User != nil {
			s3AccessKey = u.User.Username()
			s3SecretKey, _ = u.User.Password()
			u.User = nil
		}
		s3Endpoint = u.String()
		if isGoFakeS3() {
			quirks = append(quirks, blobtest.MetadataMergedOnOverwrite())
		}
	}
	code := m.Run()
	if code == 0 {
		// Stores close their idle connections in t.Cleanup; nothing else may
		// be left running.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// isGoFakeS3 reports whether the server is gofakes3, which names itself as
// the owner in ListBuckets.
func isGoFakeS3() bool {
	s, err := New(context.Background(), Config{
		Bucket: "probe", Endpoint: s3Endpoint, UsePathStyle: true,
		AccessKeyID: s3AccessKey, SecretAccessKey: s3SecretKey,
	})
	if err != nil {
		return false
	}
	defer func() { _ = s.Close() }()
	out, err := s.client.ListBuckets(context.Background(), &s3.ListBucketsInput{})
	return err == nil && out.Owner != nil && aws.ToString(out.Owner.DisplayName) == "GoFakeS3"
}

// newTestStore returns a store over a new, empty bucket of the real server,
// emptied and removed when the test ends.
func newTestStore(t testing.TB) *Store {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	s, err := New(context.Background(), Config{
		Bucket:          "blobtest-" + hex.EncodeToString(rnd[:]),
		Endpoint:        s3Endpoint,
		UsePathStyle:    true,
		AccessKeyID:     s3AccessKey,
		SecretAccessKey: s3SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeBucket(s); err != nil {
			t.Error(err)
		}
		_ = s.Close()
	})
	return s
}

// removeBucket deletes every object (valid keys or not) and the bucket.
func removeBucket(s *Store) error {
	ctx := context.Background()
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("failed to list bucket %q: %w", s.bucket, err)
		}
		for _, o := range page.Contents {
			if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: o.Key}); err != nil {
				return fmt.Errorf("failed to delete object %q: %w", aws.ToString(o.Key), err)
			}
		}
	}
	if _, err := s.client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(s.bucket)}); err != nil {
		return fmt.Errorf("failed to delete bucket %q: %w", s.bucket, err)
	}
	return nil
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return newTestStore(t) }, quirks...)
}

func BenchmarkPutGet64KiB(b *testing.B) {
	blobtest.BenchPutGet(b, newTestStore(b), 64<<10)
}

func TestEnsureBucketIsIdempotent(t *testing.T) {
	g := NewWithT(t)
	s := newTestStore(t)
	ctx := context.Background()
	_, err := s.Put(ctx, "tenants/acme/x", strings.NewReader("x"), 1, blob.PutOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.EnsureBucket(ctx)).To(Succeed())
	_, err = s.Head(ctx, "tenants/acme/x")
	g.Expect(err).NotTo(HaveOccurred(), "an existing bucket is left as it is")
}

func TestMissingBucketIsNotObjectNotFound(t *testing.T) {
	g := NewWithT(t)
	if skipReason != "" {
		t.Skip(skipReason)
	}
	s, err := New(context.Background(), Config{
		Bucket: "no-such-bucket-here", Endpoint: s3Endpoint, UsePathStyle: true,
		AccessKeyID: s3AccessKey, SecretAccessKey: s3SecretKey,
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close() })
	_, _, err = s.Get(context.Background(), "tenants/acme/x")
	g.Expect(err).To(HaveOccurred())
	g.Expect(errors.Is(err, blob.ErrNotFound)).To(BeFalse(), "a configuration error must not look like a missing object: %v", err)
}

func TestPresignGet(t *testing.T) {
	g := NewWithT(t)
	s := newTestStore(t)
	ctx := context.Background()
	_, err := s.Put(ctx, "tenants/acme/share.txt", strings.NewReader("shared"), 6, blob.PutOptions{ContentType: "text/plain"})
	g.Expect(err).NotTo(HaveOccurred())

	link, err := s.PresignGet(ctx, "tenants/acme/share.txt", 5*time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(link).To(ContainSubstring("X-Amz-Signature="))
	g.Expect(link).To(ContainSubstring("X-Amz-Expires=300"))
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := client.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(string(body)).To(Equal("shared"))

	for _, ttl := range []time.Duration{0, -time.Second, 8 * 24 * time.Hour} {
		_, err := s.PresignGet(ctx, "tenants/acme/share.txt", ttl)
		g.Expect(err).To(MatchError(ContainSubstring("ttl")), "ttl %s", ttl)
	}
	_, err = s.PresignGet(ctx, "tenants/acme/../b/x", time.Minute)
	g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(BeTrue())
}

// streamOnly hides ReaderAt and Seeker, so Put takes the spooling path.
type streamOnly struct{ r io.Reader }

func (s streamOnly) Read(p []byte) (int, error) { return s.r.Read(p) }

func TestSpoolsLargeStreamsToDisk(t *testing.T) {
	s := newTestStore(t)
	s.spoolMem = 1 << 20
	s.tempDir = t.TempDir()
	content := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	for _, size := range []int64{int64(len(content)), -1} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			obj, err := s.Put(ctx, "tenants/acme/spooled", streamOnly{bytes.NewReader(content)}, size, blob.PutOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(obj.Size).To(Equal(int64(len(content))))
			rc, _, err := s.Get(ctx, "tenants/acme/spooled")
			g.Expect(err).NotTo(HaveOccurred())
			data, err := io.ReadAll(rc)
			_ = rc.Close()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(bytes.Equal(data, content)).To(BeTrue())
			entries, err := os.ReadDir(s.tempDir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(entries).To(BeEmpty(), "the spool file is removed")

			_, err = s.Put(ctx, "tenants/acme/spooled", streamOnly{bytes.NewReader(content)}, int64(len(content))-1, blob.PutOptions{})
			g.Expect(errors.Is(err, blob.ErrSizeMismatch)).To(BeTrue(), "put: %v", err)
			entries, err = os.ReadDir(s.tempDir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(entries).To(BeEmpty(), "the spool file is removed after a failure too")
		})
	}
}

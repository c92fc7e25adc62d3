package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/goleak"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/runtime/blob/s3blob"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// The real servers of the package's tests: a kube-apiserver for the
// Provider's Leases and Secrets, an S3-protocol server for profile
// archives. Each is skipped loudly (failed under CI) when it cannot start.
var (
	kube       client.Client
	kubeSkip   string
	bucket     *s3blob.Store
	presigner  *s3.PresignClient
	bucketName string
	s3Skip     string
)

func TestMain(m *testing.M) {
	baseline := goleak.IgnoreCurrent()
	code := run(m)
	if code == 0 {
		if err := goleak.Find(append(controlplane.LeakIgnores(
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")), baseline)...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	endpoint, stopS3, err := services.S3()
	if err != nil {
		reason, fatal := services.Unavailable("S3", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		s3Skip = reason
	} else {
		defer stopS3()
		if err := openBucket(endpoint); err != nil {
			fmt.Fprintln(os.Stderr, "S3 set-up failed:", err)
			return 1
		}
	}
	env, k, reason, err := controlplane.Connect()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if reason != "" {
		kubeSkip = reason
		return m.Run()
	}
	defer func() { _ = env.Stop() }()
	kube = k
	return m.Run()
}

// openBucket creates a fresh bucket and a presigner over it, as the
// operator signs profile URLs.
func openBucket(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	key, secret := "test", "test-secret"
	if u.User != nil {
		key = u.User.Username()
		secret, _ = u.User.Password()
		u.User = nil
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	bucketName = "remotetest-" + hex.EncodeToString(rnd[:])
	ctx := context.Background()
	if bucket, err = s3blob.New(ctx, s3blob.Config{Bucket: bucketName, Endpoint: u.String(), UsePathStyle: true, AccessKeyID: key, SecretAccessKey: secret}); err != nil {
		return err
	}
	if err := bucket.EnsureBucket(ctx); err != nil {
		return err
	}
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(u.String()), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")})
	presigner = s3.NewPresignClient(c)
	return nil
}

func needS3(t testing.TB) {
	t.Helper()
	if s3Skip != "" {
		t.Skip("SKIPPED LOUDLY: " + s3Skip)
	}
}

func needKube(t testing.TB) {
	t.Helper()
	if kubeSkip != "" {
		t.Skip("SKIPPED LOUDLY: " + kubeSkip)
	}
}

// presigned returns the GET and PUT URLs of key, as the operator makes them.
func presigned(t testing.TB, key string) (get, put string) {
	t.Helper()
	ctx := context.Background()
	g, err := presigner.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key)}, s3.WithPresignExpires(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p, err := presigner.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucketName), Key: aws.String(key)}, s3.WithPresignExpires(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return g.URL, p.URL
}

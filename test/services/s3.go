package services

import (
	"fmt"
	"os"
	"strconv"
)

// S3URLEnv names an S3-compatible server to use instead of starting one, e.g.
// "http://127.0.0.1:8333". Credentials, when the server checks them, go in the
// URL's user info ("http://KEY:SECRET@host:port"); tests create and delete their
// own buckets.
const S3URLEnv = "PICOBOT_TEST_S3_URL"

// S3 returns the endpoint URL of an S3-protocol server for tests and a function
// that stops it. With PICOBOT_TEST_S3_URL set it uses that server and stop does
// nothing; otherwise hack/s3.sh starts a throwaway gofakes3 server (a separate
// process over real HTTP, installed once into the cache), which stop ends. The
// server also ends when this process exits without calling stop. Clients must
// use path-style addressing.
func S3() (endpoint string, stop func(), err error) {
	if url := os.Getenv(S3URLEnv); url != "" {
		return url, func() {}, nil
	}
	endpoint, err = hackScript("s3.sh", "start", "--owner-pid", strconv.Itoa(os.Getpid()))
	if err != nil {
		return "", nil, err
	}
	stop = func() {
		if _, err := hackScript("s3.sh", "stop", endpoint); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop S3 server %s: %v\n", endpoint, err)
		}
	}
	return endpoint, stop, nil
}

// S3SigningURLEnv names an S3 server that checks signatures, to use instead
// of starting one (credentials in the URL's user info).
const S3SigningURLEnv = "PICOBOT_TEST_S3_SIGNING_URL"

// S3Signing is S3 for tests of what S3 itself refuses: a server that
// checks SigV4 signatures and presigned URLs (hack/versitygw.sh; gofakes3
// accepts any). The endpoint carries the server's only account in its user
// info ("http://KEY:SECRET@host:port"). Clients must use path style.
func S3Signing() (endpoint string, stop func(), err error) {
	if url := os.Getenv(S3SigningURLEnv); url != "" {
		return url, func() {}, nil
	}
	endpoint, err = hackScript("versitygw.sh", "start", "--owner-pid", strconv.Itoa(os.Getpid()))
	if err != nil {
		return "", nil, err
	}
	stop = func() {
		if _, err := hackScript("versitygw.sh", "stop", endpoint); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop S3 server: %v\n", err)
		}
	}
	return endpoint, stop, nil
}

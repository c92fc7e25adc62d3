// Package remoteblob is the artifact store of session pods in cluster mode:
// they hold no S3 credential. For each operation the pod asks the blob
// grant service (runtime/blob/blobgrant, served by the gateway in the system
// namespace) for a presigned S3 request of one key under its tenant's
// prefix, authenticating with a projected ServiceAccount token whose
// audience is Audience, and sends that request to S3 itself. Listing is
// done by the service, which lists only the tenant's prefix.
//
// This file holds the names and messages both sides share.
package remoteblob

import (
	"net/http"
	"time"

	"github.com/picobot/picobot/runtime/blob"
)

const (
	// Audience is the audience of the ServiceAccount token a session pod
	// presents: the grant service asks TokenReview for exactly it, so the
	// pod's Kubernetes API token (audience: the API server) is not accepted,
	// and this token is not accepted by the API server.
	Audience = "blob.picobot.io"
	// TokenFile is where the runtime container finds the token (a projected
	// volume of the session pod, refreshed by the kubelet).
	TokenFile = "/var/run/secrets/blob.picobot.io/token"
	// TokenExpirationSeconds is the token's lifetime (the API server's
	// minimum); the kubelet renews it at 80%.
	TokenExpirationSeconds = 600
	// EnvURL is the grant service's base URL, from the namespace's
	// connection Secret.
	EnvURL = "PICOBOT_BLOB_URL"
	// EnvTokenFile overrides TokenFile.
	EnvTokenFile = "PICOBOT_BLOB_TOKEN_FILE"
	// ServiceAccountPrefix starts the name of every session pod's
	// ServiceAccount (picobot-agent-<agent>); the service grants nothing to
	// other ServiceAccounts of a namespace.
	ServiceAccountPrefix = "picobot-agent-"

	// PathGrant answers a GrantRequest with a Grant (POST).
	PathGrant = "/blob/v1/grant"
	// PathList answers ?prefix=&limit= with a ListResponse (GET).
	PathList = "/blob/v1/list"
)

// Op is what a grant allows.
type Op string

// Operations a grant can be asked for.
const (
	OpGet    Op = "get"
	OpHead   Op = "head"
	OpPut    Op = "put"
	OpDelete Op = "delete"
)

// GrantRequest asks for one presigned request.
type GrantRequest struct {
	Op  Op     `json:"op"`
	Key string `json:"key"`
	// Size, ContentMD5 (base64), ContentType and Metadata describe the
	// content of a put; all are signed into the URL.
	Size        int64             `json:"size,omitempty"`
	ContentMD5  string            `json:"contentMD5,omitempty"`
	ContentType string            `json:"contentType,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// Grant is a presigned request: send Method to URL with exactly Header.
type Grant struct {
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Header  http.Header `json:"header,omitempty"`
	Expires time.Time   `json:"expires"`
}

// ListResponse lists objects of the caller's tenant.
type ListResponse struct {
	Objects []ListedObject `json:"objects"`
}

// ListedObject is a blob.Object as List returns it.
type ListedObject struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
	ETag    string    `json:"etag"`
}

// ErrorResponse is the body of every refusal.
type ErrorResponse struct {
	Error string `json:"error"`
	// Code names a blob error the client maps back (CodeInvalidKey, ...);
	// empty for the others.
	Code string `json:"code,omitempty"`
}

// Codes of ErrorResponse, one per blob sentinel error.
const (
	CodeInvalidKey     = "invalid_key"
	CodeInvalidOptions = "invalid_options"
	CodeTooLarge       = "too_large"
)

// Listed converts a blob.Object for the wire.
func Listed(o blob.Object) ListedObject {
	return ListedObject{Key: o.Key, Size: o.Size, ModTime: o.ModTime, ETag: o.ETag}
}

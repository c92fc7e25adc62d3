package blob

import (
	"fmt"
	"maps"
	"mime"
	"slices"
	"strings"
)

const (
	// DefaultContentType is stored when Put is given none. Set explicitly by
	// every implementation, because S3 servers disagree on their own default.
	DefaultContentType = "application/octet-stream"
	// MaxMetadataSize is S3's limit on user metadata: the bytes of all keys and
	// values together.
	MaxMetadataSize = 2048
	// maxContentTypeLength keeps a Content-Type header sane.
	maxContentTypeLength = 256
)

// Normalize validates the options and returns them as every implementation
// stores them: DefaultContentType when none is set, metadata keys lower-cased,
// nil metadata when empty. The rules come from S3, where both travel as HTTP
// headers:
//
//   - the content type is a parseable media type of printable ASCII;
//   - metadata keys are ASCII letters, digits and '-' (header proxies drop '_'),
//     unique regardless of case;
//   - metadata values are printable ASCII without leading or trailing spaces
//     (HTTP trims them, so they would not round-trip);
//   - keys and values together are at most MaxMetadataSize bytes.
//
// Values that need more (non-ASCII text) should be encoded by the caller, e.g.
// with url.QueryEscape.
func (o PutOptions) Normalize() (PutOptions, error) {
	out := PutOptions{ContentType: o.ContentType}
	if out.ContentType == "" {
		out.ContentType = DefaultContentType
	}
	if len(out.ContentType) > maxContentTypeLength || !printableASCII(out.ContentType) {
		return PutOptions{}, fmt.Errorf("%w: content type %q must be at most %d bytes of printable ASCII", ErrInvalidOptions, truncate(out.ContentType), maxContentTypeLength)
	}
	if _, _, err := mime.ParseMediaType(out.ContentType); err != nil {
		return PutOptions{}, fmt.Errorf("%w: content type %q: %w", ErrInvalidOptions, out.ContentType, err)
	}
	if len(o.Metadata) == 0 {
		return out, nil
	}
	out.Metadata = make(map[string]string, len(o.Metadata))
	total := 0
	// Sorted, so that with "A" and "a" both given the error always names the same key.
	for _, k := range slices.Sorted(maps.Keys(o.Metadata)) {
		v := o.Metadata[k]
		if !metadataKey(k) {
			return PutOptions{}, fmt.Errorf("%w: metadata key %q must be ASCII letters, digits and '-'", ErrInvalidOptions, truncate(k))
		}
		lk := strings.ToLower(k)
		if _, dup := out.Metadata[lk]; dup {
			return PutOptions{}, fmt.Errorf("%w: metadata key %q is given twice (keys are case-insensitive)", ErrInvalidOptions, lk)
		}
		if !printableASCII(v) || strings.TrimSpace(v) != v {
			return PutOptions{}, fmt.Errorf("%w: metadata %q value must be printable ASCII without leading or trailing spaces", ErrInvalidOptions, lk)
		}
		total += len(lk) + len(v)
		out.Metadata[lk] = v
	}
	if total > MaxMetadataSize {
		return PutOptions{}, fmt.Errorf("%w: metadata is %d bytes, more than %d", ErrInvalidOptions, total, MaxMetadataSize)
	}
	return out, nil
}

// CloneMetadata returns a copy of m, nil when m is empty, so an Object never
// shares its map with a caller or a cache.
func CloneMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func metadataKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && c != '-' {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

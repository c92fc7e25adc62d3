package blob

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxKeyLength is S3's key limit in bytes.
	MaxKeyLength = 1024
	// MaxSegmentLength limits one "/"-separated part of a key, in bytes. The
	// folder implementation stores each segment as a file name, and file systems
	// stop at 255 bytes; the margin leaves room for its escaping and suffixes.
	MaxSegmentLength = 200
	// TenantsRoot is the first segment of every tenant's keys.
	TenantsRoot = "tenants"
	// maxTenantLength matches a Kubernetes namespace name (DNS-1123 label),
	// since a tenant is a namespace.
	maxTenantLength = 63
)

// ValidateKey reports whether key may name an object. The rules are the
// intersection of what S3 and a local folder can store faithfully, plus what a
// prefix-based tenancy needs to be safe:
//
//   - non-empty, at most MaxKeyLength bytes, valid UTF-8;
//   - no NUL, no other control character, no backslash (a path separator on
//     Windows and a classic traversal trick);
//   - not absolute (no leading "/") and no trailing "/" (that names a folder);
//   - every "/"-separated segment non-empty, not "." or "..", at most
//     MaxSegmentLength bytes.
//
// Because no segment may be "..", a key that starts with a prefix ending in "/"
// can never resolve outside it, on any implementation.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if err := checkPath(key, false); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, truncate(key), err.Error())
	}
	return nil
}

// ValidatePrefix reports whether prefix may be used to List. The empty prefix
// lists everything. A prefix follows the key rules, except that it may end in
// "/" and its last segment may be partial ("tenants/acme/rep" matches
// "tenants/acme/report.pdf").
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkPath(prefix, true); err != nil {
		return fmt.Errorf("%w: prefix %q: %s", ErrInvalidKey, truncate(prefix), err.Error())
	}
	return nil
}

// pathError is a rule violation without the key, so callers choose how to
// quote it.
type pathError string

func (e pathError) Error() string { return string(e) }

func checkPath(p string, prefix bool) error {
	if len(p) > MaxKeyLength {
		return pathError(fmt.Sprintf("longer than %d bytes", MaxKeyLength))
	}
	if !utf8.ValidString(p) {
		return pathError("not valid UTF-8")
	}
	for _, r := range p {
		switch {
		case r == 0:
			return pathError("contains a NUL byte")
		case r == '\\':
			return pathError("contains a backslash")
		case unicode.IsControl(r):
			return pathError(fmt.Sprintf("contains control character %U", r))
		}
	}
	if strings.HasPrefix(p, "/") {
		return pathError(`is absolute (starts with "/")`)
	}
	segments := strings.Split(p, "/")
	last := len(segments) - 1
	for i, seg := range segments {
		if prefix && i == last {
			// The partial last segment of a prefix: "" (prefix ends in "/"),
			// "." or ".." (matching ".hidden", "..x") are all fine here.
			if len(seg) > MaxSegmentLength {
				return pathError(fmt.Sprintf("has a segment longer than %d bytes", MaxSegmentLength))
			}
			continue
		}
		switch {
		case seg == "" && i == last:
			return pathError(`ends with "/"`)
		case seg == "":
			return pathError(`has an empty segment ("//")`)
		case seg == "." || seg == "..":
			return pathError(fmt.Sprintf("has a %q segment", seg))
		case len(seg) > MaxSegmentLength:
			return pathError(fmt.Sprintf("has a segment longer than %d bytes", MaxSegmentLength))
		}
	}
	return nil
}

// ValidateTenant reports whether tenant is a valid tenant name: a DNS-1123
// label (lower-case letters, digits and '-', at most 63 bytes, starting and
// ending with a letter or digit), since a tenant is a Kubernetes namespace.
// The narrow alphabet keeps tenant prefixes unambiguous: no "/", no "..".
func ValidateTenant(tenant string) error {
	if tenant == "" {
		return fmt.Errorf("%w: tenant is empty", ErrInvalidKey)
	}
	if len(tenant) > maxTenantLength {
		return fmt.Errorf("%w: tenant %q is longer than %d bytes", ErrInvalidKey, truncate(tenant), maxTenantLength)
	}
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(tenant)-1) {
			return fmt.Errorf("%w: tenant %q must be lower-case letters, digits and inner '-' (a namespace name)", ErrInvalidKey, tenant)
		}
	}
	return nil
}

// TenantKey builds the key of a tenant's object: "tenants/<tenant>/<parts...>".
// Parts are joined with "/" and may themselves contain "/" (a relative path such
// as a file name from a workspace), but none may be empty or start or end with
// "/", and the result must pass ValidateKey. So no part can climb out of the
// tenant's prefix: ".." segments, absolute paths and backslashes are refused.
func TenantKey(tenant string, parts ...string) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("%w: tenant %q key has no parts", ErrInvalidKey, tenant)
	}
	for i, part := range parts {
		switch {
		case part == "":
			return "", fmt.Errorf("%w: tenant %q key part %d is empty", ErrInvalidKey, tenant, i)
		case strings.HasPrefix(part, "/") || strings.HasSuffix(part, "/"):
			return "", fmt.Errorf("%w: tenant %q key part %d %q starts or ends with \"/\"", ErrInvalidKey, tenant, i, truncate(part))
		}
	}
	key := TenantsRoot + "/" + tenant + "/" + strings.Join(parts, "/")
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// TenantPrefix returns "tenants/<tenant>/", the prefix that lists exactly one
// tenant's objects. The trailing "/" matters: "tenants/a" would also match
// tenant "ab".
func TenantPrefix(tenant string) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	return TenantsRoot + "/" + tenant + "/", nil
}

// TenantOf returns the tenant that owns key, so a handler can check that a key
// it was given belongs to the caller before using it. ok is false for keys
// outside "tenants/<tenant>/" and for invalid keys.
func TenantOf(key string) (tenant string, ok bool) {
	if ValidateKey(key) != nil {
		return "", false
	}
	rest, found := strings.CutPrefix(key, TenantsRoot+"/")
	if !found {
		return "", false
	}
	tenant, rest, found = strings.Cut(rest, "/")
	if !found || rest == "" || ValidateTenant(tenant) != nil {
		return "", false
	}
	return tenant, true
}

// truncate keeps error messages readable when a key is huge (an attack or a bug).
func truncate(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

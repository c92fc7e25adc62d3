package podspec

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxLabelValue is the longest label value Kubernetes accepts.
const maxLabelValue = 63

// maxName is the longest name of a ServiceAccount, Role or RoleBinding.
const maxName = 253

// LabelValue is s as a label value: s itself when it fits (63 bytes), else
// its first bytes, a dash and 16 hex digits of its sha256, 63 bytes in all.
// Object names reach 253 characters; label values do not.
func LabelValue(s string) string {
	if len(s) <= maxLabelValue {
		return s
	}
	return shortened(s, maxLabelValue)
}

// shortened cuts s to n bytes, the last 17 a dash and a hash of all of s,
// so different long strings stay different.
func shortened(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return s[:n-17] + "-" + hex.EncodeToString(sum[:8])
}

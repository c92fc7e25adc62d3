package blobgrant

import (
	"encoding/base64"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestExpiry: the exp claim is read from a JWT's payload; anything else
// has no expiry (the cache then keeps the entry for its TTL).
func TestExpiry(t *testing.T) {
	jwt := func(payload string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	}
	for _, tc := range []struct {
		name  string
		token string
		want  time.Time
		ok    bool
	}{
		{"integer", jwt(`{"exp":1900000000,"sub":"x"}`), time.Unix(1900000000, 0), true},
		{"fraction", jwt(`{"exp":1900000000.75}`), time.Unix(1900000000, 0), true},
		{"no exp", jwt(`{"sub":"x"}`), time.Time{}, false},
		{"exp not a number", jwt(`{"exp":"soon"}`), time.Time{}, false},
		{"payload not JSON", jwt(`exp`), time.Time{}, false},
		{"payload not base64", "a.%%%.c", time.Time{}, false},
		{"two parts", "a.b", time.Time{}, false},
		{"not a JWT", "opaque-token", time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := expiry(tc.token)
			NewWithT(t).Expect(ok).To(Equal(tc.ok))
			NewWithT(t).Expect(got).To(Equal(tc.want))
		})
	}
}

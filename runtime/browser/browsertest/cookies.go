// Package browsertest holds what the tests of browser profiles share: a
// persistent cookie is the simplest piece of identity a profile must keep.
package browsertest

import (
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
)

// SetCookie sets a persistent cookie (valid for a day) in b's default
// browser context, the one a profile keeps.
func SetCookie(b *rod.Browser, domain, name, value string) error {
	return proto.StorageSetCookies{Cookies: []*proto.NetworkCookieParam{{Name: name, Value: value, Domain: domain, Path: "/",
		Secure: true, HTTPOnly: true, Expires: proto.TimeSinceEpoch(time.Now().Add(24 * time.Hour).Unix())}}}.Call(b)
}

// Cookies lists the cookies of b's default browser context as
// "domain name=value".
func Cookies(b *rod.Browser) ([]string, error) {
	res, err := proto.StorageGetCookies{}.Call(b)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(res.Cookies))
	for _, c := range res.Cookies {
		out = append(out, c.Domain+" "+c.Name+"="+c.Value)
	}
	return out, nil
}

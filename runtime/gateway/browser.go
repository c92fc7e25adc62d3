package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// What keeps other web pages from driving the gateway through a browser on
// the same machine (cross-site requests, DNS rebinding). Each check answers
// before authentication, so a refused request runs nothing.

// hostAllowed reports whether a request's Host names this gateway: a
// loopback name or address, or one of the configured hosts. A DNS-rebinding
// page reaches a loopback gateway under its own name, which is refused.
// Without configured hosts a keyed gateway answers any name (it is reached
// through load balancers and ingresses under names it cannot know, and a
// rebinding page has no key); a keyless one only loopback names.
func (s *Server) hostAllowed(hostport string) bool {
	if len(s.hosts) == 0 && !s.keyless {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, h := range s.hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// originAllowed reports whether a browser's Origin may act on this gateway:
// its own origin (the Origin's host is the request's Host), or one that
// matches a configured pattern (path.Match on the host, as the WebSocket
// accept does).
func (s *Server) originAllowed(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" (sandboxed frames, file: pages) included
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, p := range s.origins {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}

// browserSafe refuses what a page of another site could send through a
// browser: an Origin other than the gateway's own on anything but a read,
// and a body that is not JSON (an HTML form or a "simple" fetch can send
// text/plain across sites without a preflight; JSON cannot).
//
// A binary route (uploads) takes any body but the types a page may send
// across sites without a preflight (text/plain, form encodings): its
// clients send application/octet-stream and name the file's type in the
// query.
func (s *Server) browserSafe(r *http.Request, binary bool, fail func(code, msg string)) bool {
	read := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	upgrade := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	if o := r.Header.Get("Origin"); o != "" && (!read || upgrade) && !s.originAllowed(o, r.Host) {
		fail(CodeForbidden, "cross-origin request refused: origin "+o+" may not use this gateway")
		return false
	}
	if read || r.Body == nil || r.Body == http.NoBody {
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if binary {
		switch {
		case err != nil:
			fail(CodeUnsupportedMedia, "send the file with Content-Type: application/octet-stream (its own type in ?media_type=)")
			return false
		case mt == "text/plain" || mt == "multipart/form-data" || mt == "application/x-www-form-urlencoded":
			fail(CodeUnsupportedMedia, "send the file with Content-Type: application/octet-stream and its type in ?media_type= ("+mt+" is what any web page may post here)")
			return false
		}
		return true
	}
	if err != nil || mt != "application/json" {
		fail(CodeUnsupportedMedia, "request body must be JSON: send Content-Type: application/json")
		return false
	}
	return true
}

// setUICookie gives the web UI the per-install key of a keyless gateway.
func (s *Server) setUICookie(w http.ResponseWriter) {
	if l, ok := s.auth.(Loopback); ok && l.UIKey != "" {
		http.SetCookie(w, &http.Cookie{Name: UICookie, Value: l.UIKey, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
}

// NewUIKey returns a random key for Loopback.UIKey.
func NewUIKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

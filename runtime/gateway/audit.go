package gateway

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/store"
)

// audit answers GET /api/v1/audit?agent=&session=&tool=&since=&limit=&cursor=:
// the tenant's audit records of tool calls, newest first, a page at a time;
// next_cursor continues the listing ("" after the last page).
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.AuditFilter{Agent: q.Get("agent"), SessionID: q.Get("session"), Tool: q.Get("tool")}
	for name, v := range map[string]string{"agent": f.Agent, "session": f.SessionID, "tool": f.Tool} {
		if len(v) > store.MaxAuditField {
			writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s may have at most %d bytes", name, store.MaxAuditField))
			return
		}
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("since must be a time as RFC 3339 (2026-01-02T15:04:05Z), got %q", v))
			return
		}
		f.Since = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxAuditLimit {
			writeError(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("limit must be a number from 1 to %d, got %q", store.MaxAuditLimit, v))
			return
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		c, err := decodeAuditCursor(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
			return
		}
		f.After = &c
	}
	limit := f.Limit
	if limit == 0 {
		limit = store.DefaultListLimit
	}
	recs, err := s.backend.Audit(r.Context(), f)
	if err != nil {
		s.fail(w, r, err, CodeNotFound)
		return
	}
	out := make([]map[string]any, 0, len(recs))
	for _, rec := range recs {
		out = append(out, map[string]any{"id": rec.ID, "actor": rec.Actor, "agent": rec.Agent, "session_id": rec.SessionID,
			"tool": rec.Tool, "args_digest": rec.ArgsDigest, "outcome": rec.Outcome, "duration_ms": float64(rec.Duration.Microseconds()) / 1000,
			"created_at": rec.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	next := ""
	if len(recs) == limit {
		last := recs[len(recs)-1]
		next = encodeAuditCursor(store.AuditCursor{At: last.CreatedAt, ID: last.ID})
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": out, "next_cursor": next})
}

// encodeAuditCursor is the opaque cursor of a page's last record:
// base64url of "<unix microseconds>:<id>".
func encodeAuditCursor(c store.AuditCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At.UnixMicro(), 10) + ":" + c.ID))
}

func decodeAuditCursor(v string) (store.AuditCursor, error) {
	bad := fmt.Errorf("cursor %q is not one this API returned (pass next_cursor as it came)", v)
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return store.AuditCursor{}, bad
	}
	us, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || id == "" || len(id) > store.MaxAuditField {
		return store.AuditCursor{}, bad
	}
	return store.AuditCursor{At: time.UnixMicro(n).UTC(), ID: id}, nil
}

package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// RunCards is what a Backend implements to serve the run cards of a chat
// (the sub-agent runs its delegate and sessions_spawn calls started): the
// web UI and the terminal show each as a card with its live status and a
// cancel button. A backend without it answers not_found.
type RunCards interface {
	// RunCard returns the card of a run a session of chat c started;
	// any other run is store.ErrNotFound.
	RunCard(ctx context.Context, c Chat, runID string) (delegate.Card, error)
	// CancelRun cancels such a run that has not ended (store.ErrRunFinished
	// when it has) and returns its card.
	CancelRun(ctx context.Context, c Chat, runID string) (delegate.Card, error)
}

// runChat reads the chat of a run card request (query agent and chat_id).
func runChat(w http.ResponseWriter, r *http.Request) (Chat, bool) {
	c := Chat{Channel: ChannelWeb, Agent: r.URL.Query().Get("agent"), ChatID: r.URL.Query().Get("chat_id")}
	if err := checkChat(c); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return Chat{}, false
	}
	return c, true
}

// runCard answers GET /api/v1/runs/{id}?agent=&chat_id=.
func (s *Server) runCard(w http.ResponseWriter, r *http.Request) {
	s.withRun(w, r, func(rc RunCards, c Chat) (delegate.Card, error) { return rc.RunCard(r.Context(), c, r.PathValue("id")) })
}

// cancelRun answers POST /api/v1/runs/{id}/cancel?agent=&chat_id=.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) {
	s.withRun(w, r, func(rc RunCards, c Chat) (delegate.Card, error) {
		return rc.CancelRun(r.Context(), c, r.PathValue("id"))
	})
}

func (s *Server) withRun(w http.ResponseWriter, r *http.Request, op func(RunCards, Chat) (delegate.Card, error)) {
	c, ok := runChat(w, r)
	if !ok {
		return
	}
	rc, ok := s.backend.(RunCards)
	if !ok {
		writeError(w, http.StatusNotFound, CodeNotFound, "this gateway has no run cards")
		return
	}
	card, err := op(rc, c)
	if errors.Is(err, store.ErrRunFinished) {
		writeError(w, http.StatusConflict, CodeBadRequest, "the run has already ended")
		return
	}
	if err != nil {
		s.fail(w, r, err, CodeNotFound)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": card})
}

package gateway

import (
	"context"
	"net/http"
	"strings"
)

// AgentConfig is what the web UI's configuration page shows of an agent:
// its model, whether its key is set, and its tool policy; Editable says
// whether this gateway may change them (embedded mode, through the
// manifest folder), else Edit says how (the kubectl command).
type AgentConfig struct {
	Agent    string `json:"agent"`
	Mode     string `json:"mode"`
	Editable bool   `json:"editable"`
	// Edit is how the configuration is changed outside the page: the
	// manifest file (embedded) or the kubectl command (cluster).
	Edit     string `json:"edit"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	BaseURL  string `json:"base_url"`
	// KeySet: the model's API key is there (its value is never sent);
	// KeySource says where it is read from.
	KeySet    bool     `json:"key_set"`
	KeySource string   `json:"key_source"`
	Profile   string   `json:"tools_profile"`
	Allow     []string `json:"tools_allow"`
	Deny      []string `json:"tools_deny"`
}

// AgentConfigUpdate is a change from the configuration page. An empty
// APIKey keeps the key.
type AgentConfigUpdate struct {
	Provider string   `json:"provider"`
	Model    string   `json:"model"`
	BaseURL  string   `json:"base_url"`
	APIKey   string   `json:"api_key"`
	Profile  string   `json:"tools_profile"`
	Allow    []string `json:"tools_allow"`
	Deny     []string `json:"tools_deny"`
}

// ConfigEditor is implemented by backends that show an agent's
// configuration, and change it where the mode allows (the manifest folder
// of embedded mode; a cluster backend refuses with the kubectl command).
type ConfigEditor interface {
	AgentConfig(ctx context.Context, agent string) (AgentConfig, error)
	UpdateAgentConfig(ctx context.Context, agent string, u AgentConfigUpdate) (AgentConfig, error)
}

// maxConfigKeyBytes bounds an API key sent by the page.
const maxConfigKeyBytes = 4 << 10

func (s *Server) agentConfig(w http.ResponseWriter, r *http.Request) {
	ed, ok := s.backend.(ConfigEditor)
	if !ok {
		writeError(w, http.StatusNotFound, CodeNotFound, "this gateway shows no agent configuration")
		return
	}
	c, err := ed.AgentConfig(r.Context(), r.PathValue("agent"))
	if err != nil {
		s.fail(w, r, err, CodeUnknownAgent)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"config": c})
}

func (s *Server) updateAgentConfig(w http.ResponseWriter, r *http.Request) {
	ed, ok := s.backend.(ConfigEditor)
	if !ok {
		writeError(w, http.StatusNotFound, CodeNotFound, "this gateway shows no agent configuration")
		return
	}
	var u AgentConfigUpdate
	if !decode(w, r, &u, false) {
		return
	}
	u.Provider, u.Model, u.BaseURL, u.APIKey = strings.TrimSpace(u.Provider), strings.TrimSpace(u.Model), strings.TrimSpace(u.BaseURL), strings.TrimSpace(u.APIKey)
	switch {
	case len(u.APIKey) > maxConfigKeyBytes || strings.ContainsAny(u.APIKey, "\x00\n\r"):
		writeError(w, http.StatusBadRequest, CodeBadRequest, "api_key must be one line of at most 4 KiB")
		return
	case u.Model == "" || u.Provider == "":
		writeError(w, http.StatusBadRequest, CodeBadRequest, "provider and model are required")
		return
	}
	c, err := ed.UpdateAgentConfig(r.Context(), r.PathValue("agent"), u)
	if err != nil {
		s.fail(w, r, err, CodeUnknownAgent)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"config": c})
}

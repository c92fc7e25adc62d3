package browser

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/tool"
)

type profileArgs struct {
	Action string `json:"action"`
	ID     string `json:"id,omitempty" jsonschema:"exact profile id (set_label, reset, delete)"`
	Label  string `json:"label,omitempty" jsonschema:"1-80 characters (create, set_label)"`
}

const profilesDescription = "Manage persistent browser identities (cookies and logins kept across dialogs). create returns an id to pass as the browser tool's persistent_id; labels only describe, select by exact id. reset empties its cookies and logins, keeping id and label."

// NewProfilesTool returns the browser_profiles tool.
func NewProfilesTool(o Options) tool.Tool {
	p := &profilesTool{o: o}
	return tool.New("browser_profiles", profilesDescription, p.run, tool.Enum("action", "create", "set_label", "list", "reset", "delete"),
		tool.Exclusive(), tool.Adjust(func(s *jsonschema.Schema) {
			if l := s.Properties["label"]; l != nil {
				minLen, maxLen := 1, driver.MaxLabel
				l.MinLength, l.MaxLength = &minLen, &maxLen
			}
		}))
}

type profilesTool struct{ o Options }

// DeleteWait bounds how long delete waits for the profile's running
// operation.
const DeleteWait = 2 * time.Minute

func (p *profilesTool) run(ctx context.Context, _ tool.Env, a profileArgs) (tool.Result, error) {
	if p.o.Profiles == nil {
		return tool.Errorf("error: persistent browser profiles are not available here"), nil
	}
	switch a.Action {
	case "create":
		if len(p.o.Domains) > 0 {
			return tool.Errorf("error: persistent browser profiles cannot be created: this agent's browser is restricted to allowedDomains (%s)", strings.Join(p.o.Domains, ", ")), nil
		}
		prof, err := p.o.Profiles.Create(ctx, p.o.Agent, a.Label)
		if err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		return tool.Text(fmt.Sprintf("Created browser profile %s%s (storage %s). Pass persistent_id=%q to the browser tool to use it.",
			prof.ID, labelText(prof.Label), prof.Storage, prof.ID)), nil
	case "set_label":
		if a.ID == "" || a.Label == "" {
			return tool.Errorf("error: set_label needs id and label"), nil
		}
		prof, err := p.o.Profiles.SetLabel(ctx, p.o.Agent, a.ID, a.Label)
		if err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		return tool.Text(fmt.Sprintf("Profile %s is now labelled %q.", prof.ID, prof.Label)), nil
	case "list":
		profs, err := p.o.Profiles.List(ctx, p.o.Agent)
		if err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		if len(profs) == 0 {
			return tool.Text("No browser profiles yet; create one with action create."), nil
		}
		var b strings.Builder
		b.WriteString("id\tlabel\tstorage\tactive\n")
		for _, pr := range profs {
			fmt.Fprintf(&b, "%s\t%q\t%s\t%t\n", pr.ID, pr.Label, pr.Storage, p.o.Driver.Active(driver.ProfileKey(pr.ID)))
		}
		return tool.Text(b.String()), nil
	case "reset":
		return p.reset(ctx, a.ID)
	case "delete":
		if a.ID == "" {
			return tool.Errorf("error: delete needs the exact id (see list)"), nil
		}
		if _, err := p.o.Profiles.Get(ctx, p.o.Agent, a.ID); err != nil {
			return tool.Errorf("error: %v", err), nil
		}
		wctx, cancel := context.WithTimeout(ctx, DeleteWait)
		defer cancel()
		if err := p.o.Driver.CloseKey(wctx, driver.ProfileKey(a.ID)); err != nil {
			return tool.Errorf("error: the profile is busy: %v; try again later", err), nil
		}
		if err := p.o.Profiles.Delete(ctx, p.o.Agent, a.ID); err != nil {
			if errors.Is(err, driver.ErrProfileNotFound) {
				return tool.Text("Profile " + a.ID + " was already deleted."), nil
			}
			return tool.Errorf("error: %v", err), nil
		}
		return tool.Text("Deleted browser profile " + a.ID + " with its cookies, logins and data."), nil
	}
	return tool.Errorf("error: unknown action %q", a.Action), nil
}

func labelText(l string) string {
	if l == "" {
		return ""
	}
	return fmt.Sprintf(" (label %q)", l)
}

// reset is OpenClaw's reset-profile: the profile's browser is closed, a
// browser process still holding its folder (an orphan of a crashed
// runtime) is killed, and its local data is emptied; the profile keeps its
// id and label, so its next use starts logged out. Local profiles only.
func (p *profilesTool) reset(ctx context.Context, id string) (tool.Result, error) {
	if id == "" {
		return tool.Errorf("error: reset needs the exact id (see list)"), nil
	}
	if _, err := p.o.Profiles.Get(ctx, p.o.Agent, id); err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	dir := p.o.Profiles.UserDataDir(p.o.Agent, id)
	if dir == "" {
		return tool.Errorf("error: profile %s lives in a browser pod; only local profiles can be reset (delete it and create a new one instead)", id), nil
	}
	wctx, cancel := context.WithTimeout(ctx, DeleteWait)
	defer cancel()
	if err := p.o.Driver.CloseKey(wctx, driver.ProfileKey(id)); err != nil {
		return tool.Errorf("error: the profile is busy: %v; try again later", err), nil
	}
	res, err := driver.ResetUserData(dir, 5*time.Second)
	if err != nil {
		return tool.Errorf("error: %v", err), nil
	}
	msg := "Reset browser profile " + id + ": its cookies, logins and data are gone; the next use starts a fresh browser."
	if res.Orphan > 0 {
		msg += fmt.Sprintf(" An orphaned browser process (pid %d) still held it and was stopped.", res.Orphan)
	}
	return tool.Text(msg), nil
}

package browser

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Profile is a persistent browser identity: its Chrome profile (cookies,
// logins, local storage) survives browser restarts.
type Profile struct {
	ID    string `json:"id"`
	Label string `json:"label,omitempty"`
	// Storage is where the profile lives: "local" (a folder of this
	// machine), "s3" or "pvc" (cluster mode).
	Storage string    `json:"storage"`
	Agent   string    `json:"agent"`
	Created time.Time `json:"created"`
}

// ProfileStore keeps an agent's persistent browser profiles. Profiles are
// selected by exact id only; labels merely help to recognise them.
type ProfileStore interface {
	Create(ctx context.Context, agent, label string) (Profile, error)
	SetLabel(ctx context.Context, agent, id, label string) (Profile, error)
	List(ctx context.Context, agent string) ([]Profile, error)
	Get(ctx context.Context, agent, id string) (Profile, error)
	// Delete removes the profile and all its data.
	Delete(ctx context.Context, agent, id string) error
	// UserDataDir is the local Chrome folder of a profile ("" when the
	// browser runs elsewhere).
	UserDataDir(agent, id string) string
}

// ErrProfileNotFound is returned for an id the agent has no profile of.
var ErrProfileNotFound = errors.New("no such browser profile")

// MaxLabel is the longest profile label, in characters.
const MaxLabel = 80

// CheckLabel validates a profile label: 1-80 characters, not blank, no
// control characters.
func CheckLabel(label string) error {
	n := utf8.RuneCountInString(label)
	if n == 0 || strings.TrimSpace(label) == "" {
		return errors.New("label must not be blank")
	}
	if n > MaxLabel {
		return fmt.Errorf("label is %d characters; at most %d are allowed", n, MaxLabel)
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return errors.New("label must not contain control characters")
		}
	}
	return nil
}

var profileIDPattern = regexp.MustCompile(`^bp-[a-z0-9]{10}$`)

// ValidProfileID reports whether id has the form of ids this package makes
// ("bp-" and 10 lower-case letters or digits), which is also a valid
// Kubernetes object name and a safe folder name.
func ValidProfileID(id string) bool { return profileIDPattern.MatchString(id) }

// NewProfileID returns a fresh random profile id.
func NewProfileID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [10]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "bp-" + string(b[:])
}

// DirProfiles keeps profiles in a folder (embedded mode):
// <Root>/<agent>/<id>/profile.json and <Root>/<agent>/<id>/chrome.
type DirProfiles struct {
	Root string
	// Now is the clock for creation times (time.Now when nil).
	Now func() time.Time
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

func (s *DirProfiles) agentDir(agent string) string {
	a := unsafeName.ReplaceAllString(agent, "_")
	if a == "" || a == "." || a == ".." {
		a = "_"
	}
	return filepath.Join(s.Root, a)
}

func (s *DirProfiles) dir(agent, id string) (string, error) {
	if !ValidProfileID(id) {
		return "", fmt.Errorf("%w: %q is not a profile id (ids look like bp-0123456789; use one from list)", ErrProfileNotFound, id)
	}
	return filepath.Join(s.agentDir(agent), id), nil
}

// UserDataDir implements ProfileStore.
func (s *DirProfiles) UserDataDir(agent, id string) string {
	d, err := s.dir(agent, id)
	if err != nil {
		return ""
	}
	return filepath.Join(d, "chrome")
}

// Create implements ProfileStore.
func (s *DirProfiles) Create(_ context.Context, agent, label string) (Profile, error) {
	if label != "" {
		if err := CheckLabel(label); err != nil {
			return Profile{}, err
		}
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	p := Profile{ID: NewProfileID(), Label: label, Storage: "local", Agent: agent, Created: now().UTC()}
	d, _ := s.dir(agent, p.ID)
	if err := os.MkdirAll(filepath.Join(d, "chrome"), 0o700); err != nil {
		return Profile{}, fmt.Errorf("failed to create profile folder %s: %w", d, err)
	}
	if err := s.write(d, p); err != nil {
		_ = os.RemoveAll(d)
		return Profile{}, err
	}
	return p, nil
}

func (s *DirProfiles) write(dir string, p Profile) error {
	data, _ := json.MarshalIndent(p, "", "  ")
	tmp := filepath.Join(dir, "profile.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("failed to write profile %s: %w", p.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "profile.json")); err != nil {
		return fmt.Errorf("failed to write profile %s: %w", p.ID, err)
	}
	return nil
}

// Get implements ProfileStore.
func (s *DirProfiles) Get(_ context.Context, agent, id string) (Profile, error) {
	d, err := s.dir(agent, id)
	if err != nil {
		return Profile{}, err
	}
	data, err := os.ReadFile(filepath.Join(d, "profile.json"))
	if errors.Is(err, os.ErrNotExist) {
		return Profile{}, fmt.Errorf("%w: %s", ErrProfileNotFound, id)
	}
	if err != nil {
		return Profile{}, fmt.Errorf("failed to read profile %s: %w", id, err)
	}
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil || p.ID != id {
		return Profile{}, fmt.Errorf("profile %s is damaged (%s); delete it", id, filepath.Join(d, "profile.json"))
	}
	return p, nil
}

// SetLabel implements ProfileStore.
func (s *DirProfiles) SetLabel(ctx context.Context, agent, id, label string) (Profile, error) {
	if err := CheckLabel(label); err != nil {
		return Profile{}, err
	}
	p, err := s.Get(ctx, agent, id)
	if err != nil {
		return Profile{}, err
	}
	p.Label = label
	d, _ := s.dir(agent, id)
	return p, s.write(d, p)
}

// List implements ProfileStore; profiles come oldest first.
func (s *DirProfiles) List(ctx context.Context, agent string) ([]Profile, error) {
	ents, err := os.ReadDir(s.agentDir(agent))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to list browser profiles: %w", err)
	}
	var out []Profile
	for _, e := range ents {
		if !e.IsDir() || !ValidProfileID(e.Name()) {
			continue
		}
		if p, err := s.Get(ctx, agent, e.Name()); err == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Delete implements ProfileStore.
func (s *DirProfiles) Delete(ctx context.Context, agent, id string) error {
	if _, err := s.Get(ctx, agent, id); err != nil {
		return err
	}
	d, _ := s.dir(agent, id)
	if err := os.RemoveAll(d); err != nil {
		return fmt.Errorf("failed to remove profile %s: %w", id, err)
	}
	return nil
}

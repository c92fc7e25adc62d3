// Package artifact stores files that sessions produce (/dump transcripts,
// screenshots, tool outputs): the bytes in the blob store under the tenant's
// prefix, the metadata in the state store, so listing and access control go
// through the tenant-scoped store.
package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/picobot/picobot/runtime/blob"
	"github.com/picobot/picobot/runtime/store"
)

// Store saves and opens artifacts.
type Store struct {
	Blobs blob.Store
	State store.Store
}

// ErrNotConfigured is returned by a Store without blob or state store (a
// runtime started without artifact storage).
var ErrNotConfigured = errors.New("no artifact store is configured")

func (s Store) configured() error {
	if s.Blobs == nil || s.State == nil {
		return ErrNotConfigured
	}
	return nil
}

// Save stores data as an artifact of a session and returns its record. The
// tenant comes from ctx, like every store call.
func (s Store) Save(ctx context.Context, sessionID, name, mediaType string, data []byte) (store.Artifact, error) {
	if err := s.configured(); err != nil {
		return store.Artifact{}, fmt.Errorf("failed to store artifact %q: %w", name, err)
	}
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return store.Artifact{}, err
	}
	id := store.NewID()
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	key, err := blob.TenantKey(tenant, "artifacts", id, name)
	if err != nil {
		return store.Artifact{}, fmt.Errorf("failed to name artifact %q: %w", name, err)
	}
	if _, err := s.Blobs.Put(ctx, key, bytes.NewReader(data), int64(len(data)), blob.PutOptions{ContentType: mediaType}); err != nil {
		return store.Artifact{}, fmt.Errorf("failed to store artifact %q: %w", name, err)
	}
	a, err := s.State.CreateArtifact(ctx, store.Artifact{ID: id, SessionID: sessionID, Name: name, MediaType: mediaType, BlobKey: key, Size: int64(len(data))})
	if err != nil {
		_ = s.Blobs.Delete(context.WithoutCancel(ctx), key)
		return store.Artifact{}, fmt.Errorf("failed to record artifact %q: %w", name, err)
	}
	return a, nil
}

// Open returns an artifact's bytes; only artifacts of the tenant in ctx are
// found.
func (s Store) Open(ctx context.Context, id string) (io.ReadCloser, store.Artifact, error) {
	if err := s.configured(); err != nil {
		return nil, store.Artifact{}, fmt.Errorf("failed to open artifact %q: %w", id, err)
	}
	a, err := s.State.GetArtifact(ctx, id)
	if err != nil {
		return nil, store.Artifact{}, err
	}
	r, _, err := s.Blobs.Get(ctx, a.BlobKey)
	if err != nil {
		return nil, store.Artifact{}, fmt.Errorf("failed to read artifact %q: %w", id, err)
	}
	return r, a, nil
}

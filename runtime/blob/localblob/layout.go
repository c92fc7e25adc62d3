package localblob

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/picobot/picobot/runtime/blob"
)

// On-disk layout under the root folder:
//
//	objects/<seg>/<seg>/.../<leaf>~blob        object content
//	objects/<seg>/<seg>/.../<leaf>~meta.json   sidecar: content type, metadata, ETag
//	tmp/<random>                               writes in progress
//
// S3 lets "a" and "a/b" both be objects; a file system cannot have a file and a
// folder of the same name. So folder names are the escaped segment and file
// names carry a marker suffix. Escaping doubles every '~' in a segment; a single
// '~' starts a marker. Runs of '~' in an escaped segment are therefore always
// even, and folder, content and sidecar names can never collide, whatever the
// key. Names with no '~' stay readable as they are.
const (
	objectsDir    = "objects"
	tmpDir        = "tmp"
	markerContent = "~blob"
	markerSidecar = "~meta.json"
	// maxNameLength is the common file-name limit (ext4, XFS, APFS, NTFS).
	maxNameLength = 255
)

// kind says what a directory entry under objects/ holds.
type kind int

const (
	kindUnknown kind = iota
	kindDir
	kindContent
	kindSidecar
)

func escapeSegment(seg string) string {
	return strings.ReplaceAll(seg, "~", "~~")
}

// decodeName maps a file name back to its key segment and what it holds.
// Names that this package never writes decode as kindUnknown and are ignored.
func decodeName(name string) (string, kind) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '~' {
			b.WriteByte(name[i])
			continue
		}
		if i+1 < len(name) && name[i+1] == '~' {
			b.WriteByte('~')
			i++
			continue
		}
		switch name[i:] {
		case markerContent:
			return b.String(), kindContent
		case markerSidecar:
			return b.String(), kindSidecar
		}
		return "", kindUnknown
	}
	return b.String(), kindDir
}

// objectPath locates an object's files, as paths relative to the root.
type objectPath struct {
	dirs    []string // folder names from the root, starting with objectsDir
	dir     string   // the folders joined
	content string   // the content file
	sidecar string   // the sidecar file
}

// pathOf maps a key to its files. The key must already have passed
// blob.ValidateKey, so no segment is "", "." or ".."; the escaped names are
// checked against the file-name limit here.
func pathOf(key string) (objectPath, error) {
	segs := strings.Split(key, "/")
	dirs := make([]string, 0, len(segs))
	dirs = append(dirs, objectsDir)
	for _, seg := range segs[:len(segs)-1] {
		name := escapeSegment(seg)
		if len(name) > maxNameLength {
			return objectPath{}, fmt.Errorf("%w %q: a segment is too long for a file name once escaped", blob.ErrInvalidKey, key)
		}
		dirs = append(dirs, name)
	}
	leaf := escapeSegment(segs[len(segs)-1])
	if len(leaf+markerSidecar) > maxNameLength {
		return objectPath{}, fmt.Errorf("%w %q: the last segment is too long for a file name once escaped", blob.ErrInvalidKey, key)
	}
	dir := filepath.Join(dirs...)
	return objectPath{
		dirs:    dirs,
		dir:     dir,
		content: filepath.Join(dir, leaf+markerContent),
		sidecar: filepath.Join(dir, leaf+markerSidecar),
	}, nil
}

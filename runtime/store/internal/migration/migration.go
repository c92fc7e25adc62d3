// Package migration loads the numbered SQL migrations both stores embed
// (NNNN_name.up.sql), so the two runners agree on naming and order.
package migration

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load reads dir's *.up.sql files from fsys in version order, rejecting
// malformed names and repeated versions.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	paths, err := fs.Glob(fsys, path.Join(dir, "*.up.sql"))
	if err != nil {
		return nil, fmt.Errorf("failed to list migrations: %w", err)
	}
	ms := make([]Migration, 0, len(paths))
	for _, p := range paths {
		name := path.Base(p)
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("failed to parse migration name %q: want NNNN_name.up.sql", name)
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("failed to read migration %q: %w", name, err)
		}
		ms = append(ms, Migration{Version: version, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("failed to load migrations: %q and %q share version %d",
				ms[i-1].Name, ms[i].Name, ms[i].Version)
		}
	}
	return ms, nil
}

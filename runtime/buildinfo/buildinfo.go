// Package buildinfo says which build of PicoBot is running, from what the
// Go toolchain records in every binary (module version, VCS revision and
// time), so no release step has to stamp it with -ldflags.
package buildinfo

import (
	"runtime/debug"
)

// Info describes one build.
type Info struct {
	// Version is the module version: a tag (v0.4.0), a pseudo-version, or
	// "(devel)" for a build from a working tree.
	Version string `json:"version"`
	// Revision and Time are the VCS commit and its time, when built in a
	// git checkout; Modified says the tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Go is the toolchain version.
	Go string `json:"go"`
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one-line form `picobot version` prints.
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (" + rev
		if i.Modified {
			s += ", modified"
		}
		if i.Time != "" {
			s += ", " + i.Time
		}
		s += ")"
	}
	return s + " " + i.Go
}

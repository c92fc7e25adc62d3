package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0 go1.26.0"},
		{"working tree", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "c26d153a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"}, {Key: "vcs.time", Value: "2026-12-05T22:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) (c26d153a0b1c, modified, 2026-12-05T22:00:00Z) go1.26.0"},
		{"no version", debug.BuildInfo{GoVersion: "go1.26.0"}, "(devel) go1.26.0"},
	} {
		if got := fromBuildInfo(&tc.bi).String(); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

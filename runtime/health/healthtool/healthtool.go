// Package healthtool offers the health service to agents as the read-only
// health tool. It lives apart from package health so that package stays free
// of agent dependencies (the gateway can use it without an import cycle).
package healthtool

import (
	"context"

	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/tool"
)

type toolArgs struct {
	JSON bool `json:"json,omitempty" jsonschema:"structured report instead of text"`
}

// NewTool returns the read-only health tool reporting s.
func NewTool(s *health.Service) tool.Tool {
	return tool.New("health", "Check PicoBot's dependencies (core, enabled features, optional) and how to fix what is missing.",
		func(ctx context.Context, _ tool.Env, a toolArgs) (tool.Result, error) {
			r := s.Report(ctx)
			if a.JSON {
				return tool.Text(string(r.JSON())), nil
			}
			return tool.Text(r.Text()), nil
		}, tool.ReadOnly())
}

// Feature gives every agent the health tool.
type Feature struct{ Service *health.Service }

// NewFeature returns the feature offering the health tool over s.
func NewFeature(s *health.Service) *Feature { return &Feature{Service: s} }

// Name implements feature.Feature.
func (f *Feature) Name() string { return "health" }

// Build implements feature.Feature.
func (f *Feature) Build(context.Context, *feature.Agent) (feature.Parts, error) {
	return feature.Parts{Tools: []tool.Tool{NewTool(f.Service)}}, nil
}

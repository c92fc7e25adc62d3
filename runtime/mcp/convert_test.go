package mcp_test

import (
	"strings"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/mcp"
	"github.com/picobot/picobot/runtime/tool"
)

func TestToolName(t *testing.T) {
	t.Parallel()
	cases := []struct{ server, tool, want string }{
		{"github", "create_issue", "mcp_github_create_issue"},
		{"everything", "get-sum", "mcp_everything_get_sum"},
		{"my-server", "Read.File", "mcp_my_server_read_file"},
		{"s", "", "mcp_s_tool"},
		{"s", "über", "mcp_s__ber"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			NewWithT(t).Expect(mcp.ToolName(tc.server, tc.tool)).To(Equal(tc.want))
		})
	}
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	long := "mcp_server_" + strings.Repeat("x", 70)
	cases := []struct {
		name, base string
		used       []string
		want       string
	}{
		{"free", "mcp_a_b", nil, "mcp_a_b"},
		{"taken", "mcp_a_b", []string{"mcp_a_b"}, "mcp_a_b_2"},
		{"taken twice", "mcp_a_b", []string{"mcp_a_b", "mcp_a_b_2"}, "mcp_a_b_3"},
		{"too long", long, nil, long[:64]},
		{"too long and taken", long, []string{long[:64]}, long[:62] + "_2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			used := map[string]bool{}
			for _, u := range tc.used {
				used[u] = true
			}
			got := mcp.UniqueName(tc.base, used)
			g := NewWithT(t)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(len(got)).To(BeNumerically("<=", 64))
		})
	}
}

func TestObjectSchema(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"none", nil, `{"properties":{},"type":"object"}`},
		{"passed through", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "number"}}, "required": []any{"a"}},
			`{"properties":{"a":{"type":"number"}},"required":["a"],"type":"object"}`},
		{"type added", map[string]any{"properties": map[string]any{"q": map[string]any{"type": "string"}}},
			`{"properties":{"q":{"type":"string"}},"type":"object"}`},
		{"not an object", "nonsense", `{"properties":{},"type":"object"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(string(mcp.ObjectSchema(tc.in))).To(Equal(tc.want))
		})
	}
}

func TestConvertResult(t *testing.T) {
	t.Parallel()
	size := int64(10)
	cases := []struct {
		name string
		in   *mcpsdk.CallToolResult
		want tool.Result
	}{
		{"text parts are joined", &mcpsdk.CallToolResult{Content: []mcpsdk.Content{
			&mcpsdk.TextContent{Text: "one"}, &mcpsdk.TextContent{Text: "two"}}},
			tool.Result{Content: "one\ntwo"}},
		{"media and resources are summarised, images also come as artifacts for the model", &mcpsdk.CallToolResult{Content: []mcpsdk.Content{
			&mcpsdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 1234)},
			&mcpsdk.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 5)},
			&mcpsdk.ResourceLink{URI: "file:///tmp/a.txt", Name: "a", Size: &size},
			&mcpsdk.EmbeddedResource{Resource: &mcpsdk.ResourceContents{URI: "file:///b.bin", Blob: []byte{1, 2}}},
			&mcpsdk.EmbeddedResource{Resource: &mcpsdk.ResourceContents{URI: "file:///c.txt", Text: "contents of c"}},
		}},
			tool.Result{Content: "[image image/png, 1234 bytes]\n[audio audio/wav, 5 bytes]\n[resource file:///tmp/a.txt]\n[resource file:///b.bin]\n[resource file:///c.txt]\ncontents of c",
				Artifacts: []tool.Artifact{{Name: "image-1", MediaType: "image/png", Data: make([]byte, 1234)}}}},
		{"isError stays an error", &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "repository not found"}}},
			tool.Result{Content: "repository not found", IsError: true}},
		{"structured content without text", &mcpsdk.CallToolResult{StructuredContent: map[string]any{"temperature": 21.5}},
			tool.Result{Content: `{"temperature":21.5}`}},
		{"nothing", &mcpsdk.CallToolResult{}, tool.Result{Content: "(the tool returned no content)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(mcp.ConvertResult(tc.in)).To(Equal(tc.want))
		})
	}

	t.Run("long output is cut", func(t *testing.T) {
		g := NewWithT(t)
		got := mcp.ConvertResult(&mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: strings.Repeat("é", 60_000)}}})
		g.Expect(got.Content).To(HaveSuffix("…\n[output cut at 50000 characters]"))
		g.Expect([]rune(got.Content)).To(HaveLen(50_000 + len("\n[output cut at 50000 characters]")))
	})
}

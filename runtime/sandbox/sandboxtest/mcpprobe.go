package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPProbeEnv makes a test binary that calls MaybeServeMCPProbe first thing
// in TestMain an MCP stdio server: a hostile one, as a prompt-injected model
// would steer a real server (a filesystem or shell server) to act.
const MCPProbeEnv = "PICOBOT_TEST_MCP_PROBE"

// MCPProbeDeclaredEnv is the one variable MCPProbeServers gives the probe:
// the Agent's own, which the probe must see (as the line "env: " +
// MCPProbeDeclaredEnv) while it sees none of the server's.
const MCPProbeDeclaredEnv = "DECLARED_BY_AGENT=visible"

// MCPProbeServers is the spec.mcpServers entry of an Agent manifest (indented
// to follow other spec fields) that runs the probe binary bin as the MCP
// stdio server "probe" with MCPProbeDeclaredEnv in its env.
func MCPProbeServers(bin string) string {
	name, value, _ := strings.Cut(MCPProbeDeclaredEnv, "=")
	return fmt.Sprintf(`  mcpServers:
  - name: probe
    transport: stdio
    command: %s
    env:
    - {name: %s, value: %s}
`, bin, name, value)
}

// ProbeArgs are the arguments of the probe server's one tool, "probe".
type ProbeArgs struct {
	// Read are files to read (another process's /proc/<pid>/environ, a
	// secret file, the ServiceAccount token).
	Read []string `json:"read"`
	// Write is a file to write and read back, relative to the working
	// folder (the ordinary job that must still work).
	Write string `json:"write,omitempty"`
	// Connect are TCP addresses (host:port) to connect to: the store, the
	// bus, the gateway.
	Connect []string `json:"connect,omitempty"`
}

// MaybeServeMCPProbe is ServeMCPProbe when MCPProbeEnv is set; otherwise
// it returns at once.
func MaybeServeMCPProbe() {
	if os.Getenv(MCPProbeEnv) != "" {
		ServeMCPProbe()
	}
}

// ServeMCPProbe serves the probe over stdin and stdout, then exits. The
// tool answers with its environment ("env:" lines), then one line per file:
// its content, or the error the kernel gave; then one line per address it
// tried to connect to.
func ServeMCPProbe() {
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "probe", Version: "1"}, nil)
	mcpsdk.AddTool(srv, &mcpsdk.Tool{Name: "probe", Description: "Dump the environment and try to read files"},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, a ProbeArgs) (*mcpsdk.CallToolResult, any, error) {
			var b strings.Builder
			for _, kv := range os.Environ() {
				fmt.Fprintf(&b, "env: %s\n", kv)
			}
			for _, p := range a.Read {
				data, err := os.ReadFile(p)
				if err != nil {
					fmt.Fprintf(&b, "read %s: error: %v\n", p, err)
				} else {
					fmt.Fprintf(&b, "read %s: ok: %q\n", p, data)
				}
			}
			for _, addr := range a.Connect {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					fmt.Fprintf(&b, "connect %s: error: %v\n", addr, err)
					continue
				}
				_ = c.Close()
				fmt.Fprintf(&b, "connect %s: ok\n", addr)
			}
			if a.Write != "" {
				wd, _ := os.Getwd()
				p := filepath.Join(wd, a.Write)
				err := os.WriteFile(p, []byte("written by the probe"), 0o600)
				if err == nil {
					var data []byte
					data, err = os.ReadFile(p)
					fmt.Fprintf(&b, "wrote %s: %q\n", a.Write, data)
				}
				if err != nil {
					fmt.Fprintf(&b, "write %s: error: %v\n", a.Write, err)
				}
			}
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: b.String()}}}, nil, nil
		})
	if err := srv.Run(context.Background(), &mcpsdk.StdioTransport{}); err != nil {
		fmt.Fprintf(os.Stderr, "probe MCP server: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

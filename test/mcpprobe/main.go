// Command mcpprobe is a hostile MCP stdio server for end-to-end tests: its
// one tool, probe, dumps its environment and tries to read the files it is
// given (see sandboxtest.ServeMCPProbe).
package main

import "github.com/picobot/picobot/runtime/sandbox/sandboxtest"

func main() { sandboxtest.ServeMCPProbe() }

package mcp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
	"github.com/picobot/picobot/test/services"
)

// referencePackages are the npm packages of the MCP reference servers the
// tests run against, pinned so a new release cannot change what is tested.
var referencePackages = []services.NPMPackage{
	{Name: "@modelcontextprotocol/server-everything", Version: "2026.8.31"},
	{Name: "@modelcontextprotocol/server-filesystem", Version: "2026.8.31"},
}

// ref locates the installed servers; empty (with skipReason set) when they
// could not be installed outside CI.
var ref struct {
	node       string // node binary
	everything string // server-everything's dist/index.js
	filesystem string // server-filesystem's dist/index.js
}

var skipReason string

// plantedSecret is in the test process's initial environment block, where
// /proc/<pid>/environ shows it, as a model key is in the runtime's.
const plantedSecret = "sk-planted-in-the-runtime-environ"

func TestMain(m *testing.M) {
	sandboxtest.MaybeServeMCPProbe()
	if os.Getenv("PICOBOT_TEST_PLANTED") == "" {
		// os.Setenv would not put it where /proc/<pid>/environ reads.
		env := append(os.Environ(), "PICOBOT_TEST_PLANTED=1", "PICOBOT_SECRET_LLM_OPENAI="+plantedSecret)
		if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
			fmt.Fprintf(os.Stderr, "failed to re-exec the test binary: %v\n", err)
			os.Exit(2)
		}
	}
	if err := installReferenceServers(); err != nil {
		reason, fatal := services.Unavailable("the MCP reference servers (npm)", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			os.Exit(1)
		}
		skipReason = reason
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needServers skips a test when the reference servers are missing
// (Unavailable already said so loudly, and made it fatal under CI).
func needServers(t testing.TB) {
	t.Helper()
	if ref.everything == "" {
		t.Skip(skipReason)
	}
}

// installReferenceServers installs the reference servers once into the
// cache (services.NPMInstall), outside the repository.
func installReferenceServers() error {
	prefix, node, err := services.NPMInstall("mcp", referencePackages...)
	if err != nil {
		return err
	}
	ref.node = node
	ref.everything = entryPoint(prefix, referencePackages[0].Name)
	ref.filesystem = entryPoint(prefix, referencePackages[1].Name)
	for _, p := range []string{ref.everything, ref.filesystem} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("failed to find the entry point of an MCP reference server: %w", err)
		}
	}
	return nil
}

func entryPoint(prefix, pkg string) string {
	return filepath.Join(prefix, "node_modules", pkg, "dist", "index.js")
}

// Package builtin assembles the core tools of a runtime (files, patch, shell,
// processes, terminals, web, calculator, todo, llm_task, and web_search when
// the Agent configures a backend) and narrows them to
// an agent's effective tool set.
package builtin

import (
	"fmt"
	"os"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/calc"
	"github.com/picobot/picobot/runtime/tool/canvas"
	"github.com/picobot/picobot/runtime/tool/fs"
	"github.com/picobot/picobot/runtime/tool/llmtask"
	"github.com/picobot/picobot/runtime/tool/patch"
	"github.com/picobot/picobot/runtime/tool/policy"
	"github.com/picobot/picobot/runtime/tool/shell"
	"github.com/picobot/picobot/runtime/tool/todo"
	"github.com/picobot/picobot/runtime/tool/web"
)

// Config chooses how the core tools behave.
type Config struct {
	// Guard protects http_request and web_fetch from SSRF; a default guard
	// when nil.
	Guard *netguard.Guard
	// LLMTask enables llm_task; nil leaves it out.
	LLMTask *llmtask.Config
	// Shell options apply to bash, exec/process and pty.
	Shell []shell.Option
	// FS options apply to the file tools (workspace-only by default).
	FS []fs.Option
	// Patch options apply to apply_patch (workspace-only by default).
	Patch []patch.Option
	// ExecServer is the socket of the sandbox container's exec server, which
	// then runs the file tools (and apply_patch); default
	// $PICOBOT_SANDBOX_SOCKET, none in embedded mode. The FS options'
	// allowed paths go with each call; apply_patch there is workspace-only
	// whatever Patch says.
	ExecServer string
	// TodoStore keeps todo plans; in memory when nil.
	TodoStore todo.Store
	// WebSearch enables web_search on the Agent's backend; nil leaves it
	// out.
	WebSearch *WebSearchConfig
	// CanvasDomains restricts the pages the canvas opens, as the Agent's
	// spec.browser.allowedDomains does the browser's (empty: every public
	// host).
	CanvasDomains []string
}

// WebSearchConfig is web_search's backend: the Agent's spec.tools.webSearch
// and the key its apiKeySecretRef selects.
type WebSearchConfig struct {
	Spec picobotv1alpha1.WebSearchSpec
	// APIKey is the Brave Search subscription token; "" when the Secret
	// does not provide it, and every search then says MissingKey.
	APIKey string
	// MissingKey says what is missing and how to provide it.
	MissingKey string
	// GuardOptions come before the guard's own (tests add a resolver).
	GuardOptions []netguard.Option
	// Options apply to the tool and its backend (tests: a clock, a local
	// Brave endpoint).
	Options []web.Option
}

// Set is the core tools plus the managers that own background processes and
// terminals, which must be closed with the session or runtime.
type Set struct {
	Registry *tool.Registry
	procs    *shell.ProcessManager
	ptys     *shell.PTYManager
	// searchGuard is web_search's own guard (SearXNG's trusts its host).
	searchGuard *netguard.Guard
}

// AllowedPaths turns an Agent's spec.tools.fs into the options of the file
// and shell tools, so both reach the same places.
func AllowedPaths(spec *picobotv1alpha1.FSToolsSpec) (fsOpts []fs.Option, shellOpts []shell.Option) {
	if spec == nil || len(spec.AllowedPaths) == 0 {
		return nil, nil
	}
	var ro, rw []string
	for _, p := range spec.AllowedPaths {
		if p.Access == picobotv1alpha1.FSReadWrite {
			rw = append(rw, p.Path)
		} else {
			ro = append(ro, p.Path)
		}
	}
	return []fs.Option{fs.AllowPaths(ro, rw)}, []shell.Option{shell.WithPaths(ro, rw)}
}

// New builds the core tool set.
func New(cfg Config) (*Set, error) {
	guard := cfg.Guard
	if guard == nil {
		guard = netguard.New()
	}
	store := cfg.TodoStore
	if store == nil {
		store = todo.NewMemoryStore()
	}
	procs := shell.NewProcessManager(cfg.Shell...)
	ptys := shell.NewPTYManager(cfg.Shell...)
	tools := sandboxed(cfg, append(fs.Tools(cfg.FS...), patch.New(cfg.Patch...)))
	tools = append(tools,
		calc.New(),
		todo.New(store),
		shell.NewBash(cfg.Shell...), procs.ExecTool(), procs.ProcessTool(), ptys.Tool(),
		web.NewHTTPRequest(guard), web.NewFetch(guard),
		canvas.New(browser.Policy{Guard: guard, Domains: cfg.CanvasDomains}, nil),
	)
	if cfg.LLMTask != nil {
		tools = append(tools, llmtask.New(*cfg.LLMTask))
	}
	var searchGuard *netguard.Guard
	if cfg.WebSearch != nil {
		var t tool.Tool
		t, searchGuard = webSearch(guard, *cfg.WebSearch)
		tools = append(tools, t)
	}
	reg, err := tool.NewRegistry(tools...)
	if err != nil {
		procs.Close()
		ptys.Close()
		return nil, err
	}
	return &Set{Registry: reg, procs: procs, ptys: ptys, searchGuard: searchGuard}, nil
}

// webSearch builds web_search on the configured backend, and the guard it
// made for it (nil when it uses guard). A backend that cannot work (no key,
// an unusable base URL) still yields the tool, which then answers every
// call with why, so the model can tell the user rather than miss a tool.
func webSearch(guard *netguard.Guard, c WebSearchConfig) (tool.Tool, *netguard.Guard) {
	count := 0
	if c.Spec.Count != nil {
		count = int(*c.Spec.Count)
	}
	name := string(c.Spec.Provider)
	var p web.SearchProvider
	var own *netguard.Guard
	switch c.Spec.Provider {
	case picobotv1alpha1.WebSearchBrave:
		if c.APIKey == "" {
			p = web.Unavailable(name, c.MissingKey+" The agent's owner must provide it; do not retry.")
		} else {
			p = web.NewBrave(guard, c.APIKey, c.Options...)
		}
	case picobotv1alpha1.WebSearchSearXNG:
		own = web.SearXNGGuard(c.Spec.BaseURL, c.GuardOptions...)
		sp, err := web.NewSearXNG(own, c.Spec.BaseURL, c.Options...)
		if err != nil {
			p = web.Unavailable(name, err.Error()+". The agent's owner must fix spec.tools.webSearch.baseURL; do not retry.")
		} else {
			p = sp
		}
	default:
		p = web.Unavailable(name, fmt.Sprintf("spec.tools.webSearch.provider %q is not brave or searxng.", name))
	}
	return web.NewSearch(p, count, c.Options...), own
}

// FileTools are the tools the sandbox container runs for the runtime (the
// exec server's Config.Tools): the file tools and apply_patch, reaching
// readOnly and readWrite besides the workspace, and the runtime's own whole
// file reads and writes (fs.WorkspaceTools, execserver.WorkspaceFiles).
func FileTools(readOnly, readWrite []string) []tool.Tool {
	opt := fs.AllowPaths(readOnly, readWrite)
	return append(append(fs.Tools(opt), patch.New()), fs.WorkspaceTools(opt)...)
}

// sandboxed makes the file tools run in the session pod's sandbox container
// when the runtime has one (PICOBOT_SANDBOX_SOCKET, as for the shell tools):
// there the kernel, for a user that holds no credential, decides what they
// may open.
func sandboxed(cfg Config, tools []tool.Tool) []tool.Tool {
	sock := cfg.ExecServer
	if sock == "" {
		sock = os.Getenv(execserver.SocketEnv)
	}
	if sock == "" {
		return tools
	}
	c := execserver.NewClient(sock)
	ro, rw := fs.Allowed(cfg.FS...)
	out := make([]tool.Tool, len(tools))
	for i, t := range tools {
		out[i] = execserver.Sandboxed(c, t, ro, rw)
	}
	return out
}

// For returns the tools an agent's resolved policy allows.
func (s *Set) For(res policy.Result) *tool.Registry {
	return s.Registry.Filter(func(name string) bool { return policy.Allowed(res, name) })
}

// CloseSession ends the background processes and terminals of one session.
func (s *Set) CloseSession(id string) {
	s.procs.CloseSession(id)
	s.ptys.CloseSession(id)
}

// Close ends every background process and terminal.
func (s *Set) Close() {
	s.procs.Close()
	s.ptys.Close()
	if s.searchGuard != nil {
		s.searchGuard.CloseIdleConnections()
	}
}

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelProvider is the wire protocol an LLM endpoint speaks.
// +kubebuilder:validation:Enum=openai;anthropic
type ModelProvider string

const (
	// ProviderOpenAI is any OpenAI-compatible chat-completions endpoint (OpenAI,
	// Azure OpenAI, vLLM, Ollama, LiteLLM, ...).
	ProviderOpenAI ModelProvider = "openai"
	// ProviderAnthropic is the Anthropic Messages API.
	ProviderAnthropic ModelProvider = "anthropic"
)

// ModelRef names one LLM: which protocol, which model, where, with which key.
type ModelRef struct {
	// provider is the wire protocol of the endpoint: "openai" for any
	// OpenAI-compatible chat-completions API, "anthropic" for the Anthropic
	// Messages API.
	// +required
	Provider ModelProvider `json:"provider"`

	// model is the model name the endpoint expects, e.g. "gpt-5.2" or
	// "claude-sonnet-4-5".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// baseURL overrides the provider's default endpoint, e.g.
	// "http://vllm.models.svc:8000/v1" for a self-hosted model.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/\\\\s]+')",message="baseURL must be an http:// or https:// URL"
	BaseURL string `json:"baseURL,omitempty"`

	// apiKeySecretRef selects the key of a Secret in the Agent's namespace that
	// holds the API key. The key is injected into session pods as an environment
	// variable; it never enters the model's context or the logs. Omit it for
	// endpoints that need no key.
	// +optional
	APIKeySecretRef *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// vision says whether the model accepts images: true sends it the
	// images tools return (a browser screenshot, an image file_read reads,
	// an MCP server's image content) as image parts, false sends a short
	// text note instead. Unset, PicoBot decides from the model name (a
	// table of known vision models: gpt-4o, gpt-4.1, gpt-5, o3, o4, Claude
	// 3 and later, Gemini, ...); set it for a self-hosted model the table
	// does not know.
	// +optional
	Vision *bool `json:"vision,omitempty"`
}

// ModelSpec is the Agent's primary model plus what to use when it is unusable.
type ModelSpec struct {
	ModelRef `json:",inline"`

	// fallbacks are tried in order when the primary model is unusable (its Secret
	// is missing) or, at run time, when it keeps failing.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Fallbacks []ModelRef `json:"fallbacks,omitempty"`

	// contextWindow is the model's context size in tokens. Context compression
	// starts at 70% of it and hard-truncates above 90%.
	// +optional
	// +kubebuilder:default=128000
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=10000000
	ContextWindow *int32 `json:"contextWindow,omitempty"`

	// imageModel is the model the image tool asks about images, with its
	// own fallbacks; it is taken to accept images whatever its vision
	// field says. Without it the image tool uses the agent's model when
	// that accepts images, and is not offered when it does not.
	// +optional
	ImageModel *ImageModelSpec `json:"imageModel,omitempty"`
}

// ImageModelSpec is the model the image tool uses, plus what to use when it
// is unusable.
type ImageModelSpec struct {
	ModelRef `json:",inline"`

	// fallbacks are tried in order when the image model is unusable (its
	// Secret is missing) or, at run time, when it keeps failing.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Fallbacks []ModelRef `json:"fallbacks,omitempty"`
}

// ToolProfile is a base tool allowlist applied before allow/deny.
// +kubebuilder:validation:Enum=minimal;coding;messaging;full
type ToolProfile string

// ToolPolicy narrows the tools of one provider or provider/model.
type ToolPolicy struct {
	// profile sets a base allowlist: "minimal" (session_status only), "coding"
	// (group:fs, group:runtime, group:sessions, group:memory), "messaging"
	// (group:messaging, chat_manager, session_status) or "full" (no restriction).
	// +optional
	Profile ToolProfile `json:"profile,omitempty"`

	// allow lists tool names, `group:<name>` entries or `*` wildcard patterns.
	// Matching is case-insensitive.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	Allow []string `json:"allow,omitempty"`

	// deny lists tools that are never available. Deny always wins over allow.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	Deny []string `json:"deny,omitempty"`
}

// ToolsSpec decides which tools the model is offered; see AgentSpec.Tools.
type ToolsSpec struct {
	ToolPolicy `json:",inline"`

	// byProvider narrows tools for one provider ("openai") or one model
	// ("openai/gpt-5.2"); the provider/model key wins over the provider key.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	ByProvider map[string]ToolPolicy `json:"byProvider,omitempty"`

	// fs lets the file tools, and the programs the shell tools run, reach
	// paths beyond the session's workspace. Without it they reach the
	// workspace only (the kernel enforces it for programs, an os.Root for
	// the file tools).
	// +optional
	FS *FSToolsSpec `json:"fs,omitempty"`

	// exec decides which commands bash, exec and pty may run without asking
	// the user (the exec approvals of the reference: security, ask and an
	// allowlist). Without it every command runs (security full, ask off);
	// well-known destructive commands (rm -rf /, fork bombs, writes to
	// block devices, mkfs) are refused in every mode.
	// +optional
	Exec *ExecToolsSpec `json:"exec,omitempty"`

	// network lets the programs the shell tools run, and the MCP stdio
	// servers, connect to more TCP ports. Without it they connect only to
	// ports 53 (DNS), 80 and 443, so not to the store, bus, blob server or
	// gateway beside them (the kernel enforces it, with Landlock, where it
	// can; picobot health says where it cannot).
	// +optional
	Network *NetworkToolsSpec `json:"network,omitempty"`

	// clientTools says whether OpenAI-compatible clients may declare their
	// own function tools (the tools of POST /v1/chat/completions): the
	// model is offered them beside the agent's, and a call of one is
	// returned to the client, which runs it. Unset means true; false
	// refuses such requests with a 400 naming "tools".
	// +optional
	ClientTools *bool `json:"clientTools,omitempty"`

	// llmTask configures the llm_task tool.
	// +optional
	LLMTask *LLMTaskSpec `json:"llmTask,omitempty"`

	// webSearch offers the model web_search (group:web) on the search
	// backend it names. Without it the tool is not declared at all, so
	// agents that do not search pay nothing for it in their requests.
	// +optional
	WebSearch *WebSearchSpec `json:"webSearch,omitempty"`

	// message configures the message tool (group:messaging), which is
	// offered to agents with a telegram, feishu, slack or webhook channel.
	// +optional
	Message *MessageToolSpec `json:"message,omitempty"`
	// gateway configures the root agent's gateway tool (its configuration
	// tool; other agents never get it).
	// +optional
	Gateway *GatewayToolSpec `json:"gateway,omitempty"`
	// secrets are the saved credentials the agent may type into web pages
	// with bot_secret (a browser field chosen by its snapshot ref). The
	// model sees their names and types only: the runtime reads a value from
	// the Secret and types it into the page itself, so it never enters the
	// model's context, the history, the logs or a tool result. Without any,
	// bot_secret is not offered.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Secrets []ToolSecret `json:"secrets,omitempty"`
}

// MessageToolSpec configures the message tool: sends and channel actions
// (react, edit, delete, pin, threads, read, search, member and channel
// info) on the agent's chat platform channels.
type MessageToolSpec struct {
	// crossChat lets the message tool, called in a conversation that came
	// from a chat platform, act on other chats than that conversation's:
	// send to them, read them, react in them. Without it such a session
	// reaches only its own chat, so what is said in one chat does not leak
	// into another. Sessions that did not come from a chat platform (web,
	// terminal, API clients, scheduled runs) reach every chat of the
	// agent's channels either way.
	// +optional
	CrossChat *bool `json:"crossChat,omitempty"`
}

// GatewayToolSpec configures the gateway tool.
type GatewayToolSpec struct {
	// restart enables the tool's restart action, which restarts the
	// agent's runtime (delayMs after the call, so the reply in flight is
	// delivered). Unset means false.
	// +optional
	Restart *bool `json:"restart,omitempty"`
}

// ToolSecretType says what a saved credential is, so the model can pick the
// right one for a field without seeing it.
// +kubebuilder:validation:Enum=password;username;otp;token;text
type ToolSecretType string

// Types of saved credentials.
const (
	ToolSecretPassword ToolSecretType = "password"
	ToolSecretUsername ToolSecretType = "username"
	ToolSecretOTP      ToolSecretType = "otp"
	ToolSecretToken    ToolSecretType = "token"
	ToolSecretText     ToolSecretType = "text"
)

// ToolSecret is one saved credential bot_secret may type into a web page.
type ToolSecret struct {
	// name is how the model refers to the credential (bot_secret list and
	// type); it says nothing of the value.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// type is password (the default), username, otp, token or text.
	// +optional
	// +kubebuilder:default=password
	Type ToolSecretType `json:"type,omitempty"`

	// secretKeyRef selects the key of a Secret in the Agent's namespace that
	// holds the value. Like the model's key it reaches the session pods as
	// an environment variable of the runtime container (a Secret manifest
	// or PICOBOT_SECRET_<NAME>_<KEY> in embedded mode).
	// +required
	SecretKeyRef corev1.SecretKeySelector `json:"secretKeyRef"`

	// domains are the sites the credential belongs to: bot_secret types it
	// only into a page whose address is one of these hosts or a subdomain
	// of one ("shop.example" also covers "login.shop.example"), and only
	// into the page itself, not a frame of another page inside it. The
	// runtime checks the page's address with the browser before typing, so
	// a page that talks the model into it cannot collect the credential.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`
	// +kubebuilder:validation:items:MaxLength=253
	Domains []string `json:"domains"`
}

// LLMTaskSpec configures the llm_task tool: a JSON-only model call made on
// the Agent's own model endpoints (its model and fallbacks; a provider
// override takes that provider's endpoint and key, with the model asked
// for).
type LLMTaskSpec struct {
	// allowedModels lists the "provider/model" strings llm_task may call;
	// when set, any other is refused. Unset: any model of a provider the
	// Agent has an endpoint for.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]+/.+$`
	AllowedModels []string `json:"allowedModels,omitempty"`
}

// WebSearchProvider is the search backend web_search queries.
// +kubebuilder:validation:Enum=brave;searxng
type WebSearchProvider string

// Web search backends.
const (
	// WebSearchBrave is the Brave Search API (api.search.brave.com), which
	// needs a subscription key.
	WebSearchBrave WebSearchProvider = "brave"
	// WebSearchSearXNG is a SearXNG instance's JSON API, self-hosted in the
	// cluster or beside picobot serve.
	WebSearchSearXNG WebSearchProvider = "searxng"
)

// WebSearchSpec chooses web_search's backend and how many results a search
// returns when the model does not say.
// +kubebuilder:validation:XValidation:rule="self.provider != 'searxng' || has(self.baseURL)",message="baseURL is required with provider searxng"
// +kubebuilder:validation:XValidation:rule="self.provider == 'searxng' || !has(self.baseURL)",message="baseURL is used only with provider searxng"
// +kubebuilder:validation:XValidation:rule="self.provider != 'brave' || has(self.apiKeySecretRef)",message="apiKeySecretRef is required with provider brave"
// +kubebuilder:validation:XValidation:rule="self.provider == 'brave' || !has(self.apiKeySecretRef)",message="apiKeySecretRef is used only with provider brave"
type WebSearchSpec struct {
	// provider is brave (the Brave Search API) or searxng (a SearXNG
	// instance with its JSON format enabled).
	// +required
	Provider WebSearchProvider `json:"provider"`

	// baseURL is the SearXNG instance, e.g.
	// "http://searxng.search.svc:8080"; searches go to <baseURL>/search.
	// The host named here may be a private or loopback address (the model
	// cannot change it); cloud metadata addresses stay refused.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/\\\\s?#]+(/[^?#\\\\s]*)?$')",message="baseURL must be an http:// or https:// URL without query or fragment"
	BaseURL string `json:"baseURL,omitempty"`

	// apiKeySecretRef selects the key of a Secret in the Agent's namespace
	// that holds the Brave Search subscription token. Like the model's key
	// it reaches the session pods as an environment variable of the runtime
	// container and never the model's context, the logs or a tool's
	// programs.
	// +optional
	APIKeySecretRef *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// count is how many results a search returns when the model gives no
	// count (1-10).
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Count *int32 `json:"count,omitempty"`
}

// FSToolsSpec is where the file and shell tools may reach besides the
// session's workspace.
type FSToolsSpec struct {
	// allowedPaths are absolute folders or files, each read-only or
	// read-write. The reference's "absolute paths are accepted" behaviour is
	// this opt-in.
	// +optional
	// +listType=map
	// +listMapKey=path
	// +kubebuilder:validation:MaxItems=32
	AllowedPaths []AllowedPath `json:"allowedPaths,omitempty"`
}

// NetworkToolsSpec is where the tools' programs may connect besides the
// web.
type NetworkToolsSpec struct {
	// allowedPorts are TCP ports programs may connect to besides 53, 80
	// and 443: a database of the user's on 5432, a development server a
	// program started on 8000. The kernel tells ports apart, not hosts: a
	// port allowed here is open on every address, loopback included, so
	// allowing the port of a service of the runtime's (PostgreSQL, Redis,
	// S3, the gateway) opens that service to the programs.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	AllowedPorts []int32 `json:"allowedPorts,omitempty"`
}

// ExecSecurity is how much the shell tools may run.
// +kubebuilder:validation:Enum=deny;allowlist;full
type ExecSecurity string

// Exec security modes.
const (
	// ExecSecurityDeny refuses every command.
	ExecSecurityDeny ExecSecurity = "deny"
	// ExecSecurityAllowlist runs what the allowlist matches; other commands
	// are asked about or refused, as ask says.
	ExecSecurityAllowlist ExecSecurity = "allowlist"
	// ExecSecurityFull runs every command.
	ExecSecurityFull ExecSecurity = "full"
)

// ExecAsk is when the user is asked before a command runs.
// +kubebuilder:validation:Enum=off;on-miss;always
type ExecAsk string

// Exec ask modes.
const (
	// ExecAskOff never asks: what security does not run is refused.
	ExecAskOff ExecAsk = "off"
	// ExecAskOnMiss asks for commands the allowlist does not match.
	ExecAskOnMiss ExecAsk = "on-miss"
	// ExecAskAlways asks for every command.
	ExecAskAlways ExecAsk = "always"
)

// ExecToolsSpec is the exec approval policy of the shell tools. A command
// that needs an answer is shown to the user in the chat the turn belongs
// to (web UI and terminal: Approve/Deny; chat platforms: a message with a
// short code to answer with /approve CODE or /deny CODE) and is refused
// when no answer comes within approvalTimeout.
// +kubebuilder:validation:XValidation:rule="!has(self.allowlist) || size(self.allowlist) == 0 || self.security == 'allowlist'",message="allowlist is used only with security: allowlist"
type ExecToolsSpec struct {
	// security is deny (no command runs), allowlist (commands the
	// allowlist matches run) or full (every command runs; the default).
	// +optional
	// +kubebuilder:default=full
	Security ExecSecurity `json:"security,omitempty"`

	// ask is off (never ask: what security does not run is refused;
	// the default), on-miss (ask about commands the allowlist does not
	// match) or always (ask about every command).
	// +optional
	// +kubebuilder:default=off
	Ask ExecAsk `json:"ask,omitempty"`

	// allowlist are command patterns, * standing for any text ("git
	// status", "git *", "python3 scripts/*"). A command line matches when
	// each of its simple commands (split at |, ||, && and ;) matches a
	// pattern; a line with $(...), backticks, redirections or & matches
	// none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Allowlist []string `json:"allowlist,omitempty"`

	// approvalTimeout is how long a command waits for the user's answer
	// before it is refused; 2m when omitted.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="approvalTimeout must be a duration such as 30s or 2m, from 1s to 1h"
	ApprovalTimeout *Duration `json:"approvalTimeout,omitempty"`
}

// FSAccess is how a tool may use an allowed path.
// +kubebuilder:validation:Enum=ReadOnly;ReadWrite
type FSAccess string

// Access modes of allowed paths.
const (
	FSReadOnly  FSAccess = "ReadOnly"
	FSReadWrite FSAccess = "ReadWrite"
)

// AllowedPath is one folder or file the tools may reach.
type AllowedPath struct {
	// path is an absolute, clean path (no "..", not "/").
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="path must be absolute (start with /)"
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(p, p == '..' || p == '.')",message="path must not contain . or .. segments"
	// +kubebuilder:validation:XValidation:rule="self.replace('/', '') != ''",message="path must not be / (the whole file system)"
	Path string `json:"path"`

	// access is ReadOnly (the default) or ReadWrite.
	// +optional
	// +kubebuilder:default=ReadOnly
	Access FSAccess `json:"access,omitempty"`
}

// SkillSource is one skill: a SKILL.md given inline or read from a ConfigMap.
// +kubebuilder:validation:XValidation:rule="has(self.content) != has(self.configMapRef)",message="a skill needs exactly one of content or configMapRef"
type SkillSource struct {
	// name identifies the skill; it overrides a namespace-shared or built-in skill
	// of the same name.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// content is the SKILL.md text (frontmatter with name and description, then
	// the instructions).
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Content string `json:"content,omitempty"`

	// configMapRef selects a ConfigMap key in the Agent's namespace holding the
	// SKILL.md text. Changes reach running sessions without a restart.
	// +optional
	ConfigMapRef *corev1.ConfigMapKeySelector `json:"configMapRef,omitempty"`
}

// MCPTransport is how PicoBot talks to an MCP server.
// +kubebuilder:validation:Enum=stdio;sse;streamable-http
type MCPTransport string

// MCPToolSetting tunes how the loop runs one tool of an MCP server.
type MCPToolSetting struct {
	// name is the tool's name as the MCP server lists it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`

	// readOnly marks a tool without side effects; a batch of read-only,
	// non-exclusive calls runs concurrently.
	// +optional
	ReadOnly *bool `json:"readOnly,omitempty"`

	// exclusive forces the tool to run alone, never beside another call.
	// +optional
	Exclusive *bool `json:"exclusive,omitempty"`
}

// MCPServer connects the agent to a Model Context Protocol server whose tools
// are offered to the model.
// +kubebuilder:validation:XValidation:rule="self.transport == 'stdio' ? (has(self.command) && !has(self.url)) : (has(self.url) && !has(self.command))",message="stdio servers need command (and no url); sse and streamable-http servers need url (and no command)"
type MCPServer struct {
	// name identifies the server in /mcp output and prefixes its tools.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// transport is "stdio" (a subprocess in the session pod), "sse" or
	// "streamable-http" (a remote URL).
	// +required
	Transport MCPTransport `json:"transport"`

	// command starts a stdio server, e.g. "npx".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Command string `json:"command,omitempty"`

	// args are passed to command.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Args []string `json:"args,omitempty"`

	// env sets environment variables of a stdio server; use valueFrom.secretKeyRef
	// for tokens.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []corev1.EnvVar `json:"env,omitempty"`

	// url of an sse or streamable-http server.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://')",message="url must be an http:// or https:// URL"
	URL string `json:"url,omitempty"`

	// headersSecretRef names a Secret whose keys are sent as HTTP headers to a
	// remote server (e.g. Authorization).
	// +optional
	HeadersSecretRef *corev1.LocalObjectReference `json:"headersSecretRef,omitempty"`

	// tools tunes individual tools of this server.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Tools []MCPToolSetting `json:"tools,omitempty"`

	// timeout bounds one tool call of this server; 60s when omitted. (Applied by
	// the runtime, not as a schema default: defaults inside list items make every
	// client-side `kubectl apply` rewrite the list.)
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="timeout must be a duration such as 30s or 2m, from 1s to 1h"
	Timeout *Duration `json:"timeout,omitempty"`
}

// Delegate names another Agent this one may hand tasks to with the delegate tool.
type Delegate struct {
	// name is how the model refers to the sub-agent.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// agentRef names the Agent (same namespace) that does the work.
	// +required
	AgentRef corev1.LocalObjectReference `json:"agentRef"`

	// description tells the model when to use this sub-agent.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// SensitiveCategory is a kind of personal information memory may keep only when
// allowed.
// +kubebuilder:validation:Enum=health;finance;legal;family
type SensitiveCategory string

// MemorySpec configures long-term memory.
type MemorySpec struct {
	// enabled turns long-term memory (knowledge + timeline) on.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// timelineRetentionDays is how long compression summaries are kept.
	// +optional
	// +kubebuilder:default=90
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3650
	TimelineRetentionDays *int32 `json:"timelineRetentionDays,omitempty"`

	// idleConsolidationMinutes summarises an idle session into timeline memory
	// after this many minutes; 0 turns it off.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10080
	IdleConsolidationMinutes *int32 `json:"idleConsolidationMinutes,omitempty"`

	// allowSensitive lists sensitive categories memory may keep. Identity numbers,
	// bank cards, passwords and tokens are always refused.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	AllowSensitive []SensitiveCategory `json:"allowSensitive,omitempty"`
}

// BrowserSpec configures the browser tool.
// +kubebuilder:validation:XValidation:rule="!(has(self.allowedDomains) && size(self.allowedDomains) > 0 && has(self.profileRef))",message="a browser restricted to allowedDomains cannot use a persistent profile (profileRef)"
type BrowserSpec struct {
	// enabled registers the browser and browser_profiles tools.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// profileRef names a BrowserProfile (same namespace) to use by default.
	// +optional
	ProfileRef *corev1.LocalObjectReference `json:"profileRef,omitempty"`

	// allowedDomains restricts navigation, sub-resources, WebSocket, EventSource
	// and WebRTC to these domains ("example.com", "*.example.com"). With it set,
	// persistent browser identities cannot be created or used.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	AllowedDomains []string `json:"allowedDomains,omitempty"`
}

// ChannelType is a chat channel an agent can be reached through.
// +kubebuilder:validation:Enum=web;terminal;telegram;feishu;slack;webhook
type ChannelType string

// Channel connects the agent to a chat platform.
// +kubebuilder:validation:XValidation:rule="self.type in ['web', 'terminal'] || has(self.secretRef)",message="telegram, feishu, slack and webhook channels need secretRef with their credentials"
type Channel struct {
	// type of the channel.
	// +required
	Type ChannelType `json:"type"`

	// name distinguishes two channels of one type (e.g. two Telegram bots);
	// defaults to the type.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// secretRef names a Secret (same namespace) with the channel's credentials:
	// telegram: token, webhookSecret; feishu: appID, appSecret, verificationToken,
	// encryptKey; slack: botToken, signingSecret; webhook: signingSecret, url (where
	// replies are POSTed).
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`

	// chatID is the chat the agent speaks in on its own initiative through
	// this connector: bot_connector send, and agenda reminders and task
	// results sent to the connector rather than to the chat they came from
	// (a Telegram chat id, a Slack or Feishu channel id, a webhook chat).
	// Without it the connector reaches only chats that wrote to the agent.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ChatID string `json:"chatID,omitempty"`
}

// RuntimeSpec shapes the session pods that run this agent.
type RuntimeSpec struct {
	// image of the session runtime; defaults to the operator's runtime image.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// resources of each session pod.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// idleTimeout after which a session pod with no messages exits (scale to zero).
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="idleTimeout must be a duration such as 30s, 10m or 1h30m, from 1s to 24h"
	IdleTimeout *Duration `json:"idleTimeout,omitempty"`

	// warmPool is how many idle runtime pods are kept ready to claim new sessions.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	WarmPool *int32 `json:"warmPool,omitempty"`

	// runtimeClassName runs session pods under a sandboxing RuntimeClass (gVisor,
	// Kata).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// maxSessions caps concurrently active sessions of this agent; further wakes
	// are answered with an error.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxSessions *int32 `json:"maxSessions,omitempty"`
}

// AgentRole says whether an Agent is its namespace's root agent.
// +kubebuilder:validation:Enum=root;named
type AgentRole string

const (
	// AgentRoleRoot marks the namespace's root agent: the one scheduled runs
	// naming no agent (cron jobs without agentRef, routine maintenance) use.
	// A namespace has at most one; the operator reports a conflict on each.
	AgentRoleRoot AgentRole = "root"
	// AgentRoleNamed is an ordinary (named) agent, e.g. another's sub-agent.
	AgentRoleNamed AgentRole = "named"
)

// AgentSpec is what an agent is: its model, instructions, tools and where it runs.
// +kubebuilder:validation:XValidation:rule="!has(self.tools) || !has(self.tools.message) || !has(self.tools.message.crossChat) || !self.tools.message.crossChat || (has(self.channels) && self.channels.exists(c, !(c.type in ['web', 'terminal'])))",message="tools.message.crossChat needs a telegram, feishu, slack or webhook channel in channels"
// +kubebuilder:validation:XValidation:rule="!has(self.tools) || !has(self.tools.secrets) || size(self.tools.secrets) == 0 || !has(self.browser) || !has(self.browser.enabled) || self.browser.enabled",message="spec.tools.secrets needs the browser (bot_secret types them into web pages); remove them or spec.browser.enabled: false"
type AgentSpec struct {
	// role makes this Agent the namespace's root agent ("root"), the one jobs
	// naming no agent run on. When no Agent says root, the namespace's only
	// Agent is root, else the Agent named "root".
	// +optional
	Role *AgentRole `json:"role,omitempty"`

	// model is the LLM the agent calls. When omitted, the namespace default from
	// the ConfigMap "picobot-defaults" is used (status.effectiveModel.source tells
	// which).
	// +optional
	Model *ModelSpec `json:"model,omitempty"`

	// instructions are the agent's system prompt, before skills and memory.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Instructions string `json:"instructions,omitempty"`

	// tools selects which tools the model is offered.
	//
	// The effective set is computed in this order: profile (or every tool when
	// unset/"full"); allow (with a profile it adds tools, without one it is the
	// allowlist; an allow list naming only unknown tools is ignored with a warning);
	// byProvider (the entry for "provider/model", else "provider", which can only
	// narrow); deny last, which always wins. Groups: group:runtime (exec, bash,
	// process, pty), group:fs (file_read, file_write, file_edit, file_search,
	// content_search, apply_patch), group:sessions, group:memory, group:web,
	// group:ui (browser, browser_profiles), group:automation (cron_*, bot_task,
	// bot_agenda), group:messaging (send_message, message), group:skills, group:system,
	// group:picobot (every built-in tool; group:openclaw is its OpenClaw name;
	// OpenClaw's group:nodes selects nothing here). OpenClaw's read, write and
	// edit name file_read, file_write and file_edit, and mcp__<server>__<tool>
	// names mcp_<server>_<tool>. status.effectiveTools shows the result.
	// +optional
	Tools *ToolsSpec `json:"tools,omitempty"`

	// skills are the agent's own skills; they override namespace-shared and
	// built-in skills of the same name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Skills []SkillSource `json:"skills,omitempty"`

	// mcpServers whose tools the agent may use.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	MCPServers []MCPServer `json:"mcpServers,omitempty"`

	// delegates are the sub-agents this agent may call with the delegate tool.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Delegates []Delegate `json:"delegates,omitempty"`

	// memory configures long-term memory.
	// +optional
	Memory *MemorySpec `json:"memory,omitempty"`

	// browser configures the browser tool.
	// +optional
	Browser *BrowserSpec `json:"browser,omitempty"`

	// channels the agent can be reached through besides the gateway API.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Channels []Channel `json:"channels,omitempty"`

	// runtime shapes the session pods.
	// +optional
	Runtime *RuntimeSpec `json:"runtime,omitempty"`
}

// ModelSource says where the effective model came from.
// +kubebuilder:validation:Enum=Spec;Fallback;NamespaceDefault
type ModelSource string

const (
	// ModelSourceSpec means the model came from spec.model.
	ModelSourceSpec ModelSource = "Spec"
	// ModelSourceFallback means one of spec.model.fallbacks is used.
	ModelSourceFallback ModelSource = "Fallback"
	// ModelSourceNamespaceDefault means the namespace's picobot-defaults ConfigMap
	// supplied the model.
	ModelSourceNamespaceDefault ModelSource = "NamespaceDefault"
)

// EffectiveModel is the model sessions will use, and why.
type EffectiveModel struct {
	// provider of the effective model.
	// +required
	Provider ModelProvider `json:"provider"`
	// model name of the effective model.
	// +required
	Model string `json:"model"`
	// baseURL of the effective model, when not the provider default.
	// +optional
	BaseURL string `json:"baseURL,omitempty"`
	// source says where the choice came from: Spec, Fallback or NamespaceDefault.
	// +required
	Source ModelSource `json:"source"`
	// fallbackIndex is the index in spec.model.fallbacks when source is Fallback.
	// +optional
	FallbackIndex *int32 `json:"fallbackIndex,omitempty"`
	// contextWindow in tokens.
	// +optional
	ContextWindow int32 `json:"contextWindow,omitempty"`
}

// AgentStatus is what the operator observed about the agent.
type AgentStatus struct {
	// conditions: Ready (summary), ModelResolved, ToolsResolved, ReferencesResolved.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation this status describes; 0
	// until the operator has looked at the object, so that kstatus (Flux,
	// cli-utils) reads a new object as InProgress, not Current.
	// +kubebuilder:default=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// effectiveModel is the model sessions use and where the choice came from.
	// +optional
	EffectiveModel *EffectiveModel `json:"effectiveModel,omitempty"`

	// effectiveTools is the sorted set of built-in tools the model is offered
	// after the tool policy (MCP tools are filtered the same way at run time).
	// +optional
	// +listType=atomic
	EffectiveTools []string `json:"effectiveTools,omitempty"`

	// activeSessions is the number of sessions with a runtime.
	// +optional
	ActiveSessions *int32 `json:"activeSessions,omitempty"`

	// warmPods is the number of idle runtime pods ready to claim a session.
	// +optional
	WarmPods *int32 `json:"warmPods,omitempty"`

	// usage is the Agent's model usage today and this month (UTC), as
	// recorded in the store; set when the operator reads the store.
	// +optional
	Usage *UsageStatus `json:"usage,omitempty"`
}

// Agent is an AI assistant: an LLM with instructions, tools, skills and memory,
// reachable through chat channels. Each active session runs in its own pod.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ag;agt,categories=picobot
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.effectiveModel.model`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.effectiveModel.source`,priority=1
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.activeSessions`
// +kubebuilder:printcolumn:name="Warm",type=integer,JSONPath=`.status.warmPods`,priority=1
// +kubebuilder:printcolumn:name="Today Tokens",type=integer,JSONPath=`.status.usage.dayTokens`,priority=1
// +kubebuilder:printcolumn:name="Today Cost",type=string,JSONPath=`.status.usage.dayCost`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Agent struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the agent: its model, instructions, tools and skills, the
	// MCP servers and sub-agents it may use, its channels, and the pods its
	// sessions run in.
	// +required
	Spec AgentSpec `json:"spec"`

	// status is written by the operator. It defaults to an empty status
	// (observedGeneration 0) until then.
	// +kubebuilder:default={}
	// +optional
	Status AgentStatus `json:"status,omitempty"`
}

// AgentList is a list of Agents.
// +kubebuilder:object:root=true
type AgentList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Agent `json:"items"`
}

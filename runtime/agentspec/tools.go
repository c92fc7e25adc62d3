package agentspec

import (
	"slices"
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/approval"
	"github.com/picobot/picobot/runtime/tool/policy"
)

// WebSearchTool is the tool spec.tools.webSearch turns on.
const WebSearchTool = "web_search"

// SecretTool is the tool spec.tools.secrets turns on.
const SecretTool = "bot_secret"

// ConnectorTool is the tool spec.channels turn on.
const ConnectorTool = "bot_connector"

// MessageTool is OpenClaw's message tool: channel actions on the agent's
// chat platform channels, offered only to an Agent that has one.
const MessageTool = "message"

// IsChatPlatform reports whether channels of type t are on a chat platform
// (telegram, feishu, slack, a webhook), the channels message acts on; web
// and terminal are the gateway's own clients.
func IsChatPlatform(t picobotv1alpha1.ChannelType) bool {
	return t != "" && t != "web" && t != "terminal"
}

// HasChatPlatformChannel reports whether the Agent has a channel on a chat
// platform (IsChatPlatform).
func HasChatPlatformChannel(a *picobotv1alpha1.Agent) bool {
	return slices.ContainsFunc(a.Spec.Channels, func(c picobotv1alpha1.Channel) bool { return IsChatPlatform(c.Type) })
}

// orchestrationTools are the tools of an Agent with delegate edges, which
// the runtime injects past a profile or allowlist (as PicoBot does).
var orchestrationTools = []string{"delegate", "agent_task"}

// edgeTools work along the delegate edges too (OpenClaw's face of them) but
// are not injected: a profile or allowlist that leaves them out keeps them
// out. Without edges they have nothing to list or spawn.
var edgeTools = []string{"agents_list", "sessions_spawn"}

// ConfigTools are the root agent's configuration tools (reload_config and
// gateway, runtime/tool/agentconfig): every other Agent is denied them.
var ConfigTools = []string{"reload_config", "gateway"}

// ToolPolicy converts the Agent's tools settings into the shared policy
// package's input, turning disabled features into denies so the effective set
// shows what the model will really be offered. The Agent counts as its
// namespace's root agent when it says spec.role: root (ToolPolicyAs for a
// root agent by the rest of the rule, which needs the other Agents).
func ToolPolicy(a *picobotv1alpha1.Agent) policy.Spec { return ToolPolicyAs(a, IsRoot(a)) }

// ToolPolicyAs is ToolPolicy for an Agent known to be, or not to be, its
// namespace's root agent (RootAgent): only the root agent may be offered
// ConfigTools.
func ToolPolicyAs(a *picobotv1alpha1.Agent, root bool) policy.Spec {
	var spec policy.Spec
	if t := a.Spec.Tools; t != nil {
		spec.Profile = policy.Profile(t.Profile)
		spec.Allow = t.Allow
		spec.Deny = append([]string(nil), t.Deny...)
		if len(t.ByProvider) > 0 {
			spec.ByProvider = make(map[string]policy.ProviderSpec, len(t.ByProvider))
			for k, v := range t.ByProvider {
				spec.ByProvider[k] = policy.ProviderSpec{Profile: policy.Profile(v.Profile), Allow: v.Allow, Deny: v.Deny}
			}
		}
	}
	if b := a.Spec.Browser; b != nil && b.Enabled != nil && !*b.Enabled {
		spec.Deny = append(spec.Deny, "group:ui")
	}
	if m := a.Spec.Memory; m != nil && m.Enabled != nil && !*m.Enabled {
		spec.Deny = append(spec.Deny, "group:memory")
	}
	// web_search needs a backend: without spec.tools.webSearch it is not
	// offered (nor declared, so requests do not grow by its schema).
	if a.Spec.Tools == nil || a.Spec.Tools.WebSearch == nil {
		spec.Deny = append(spec.Deny, WebSearchTool)
	}
	// bot_secret types saved credentials: without spec.tools.secrets it
	// has nothing to type and is not declared.
	if a.Spec.Tools == nil || len(a.Spec.Tools.Secrets) == 0 {
		spec.Deny = append(spec.Deny, SecretTool)
	}
	// bot_connector speaks through the agent's channels: without any it
	// has nothing to list or send through.
	if len(a.Spec.Channels) == 0 {
		spec.Deny = append(spec.Deny, ConnectorTool)
	}
	// message acts on chat platforms: without a channel on one it is not
	// declared (nor listed among the effective tools).
	if !HasChatPlatformChannel(a) {
		spec.Deny = append(spec.Deny, MessageTool)
	}
	// image needs a model that can see images (ImageModelRefs).
	if len(ImageModelRefs(a.Spec.Model)) == 0 {
		spec.Deny = append(spec.Deny, "image")
	}
	if !root {
		spec.Deny = append(spec.Deny, ConfigTools...)
	}
	// delegate and agent_task follow the delegate edges (orchestration): an
	// Agent with none never gets them, one with some gets them even past a
	// profile or allowlist that does not name them (the runtime injects
	// them, as PicoBot does); a deny still wins.
	switch {
	case len(a.Spec.Delegates) == 0:
		spec.Deny = append(append(spec.Deny, orchestrationTools...), edgeTools...)
	case len(spec.Allow) > 0 || !strings.EqualFold(strings.TrimSpace(string(spec.Profile)), string(policy.ProfileFull)) && spec.Profile != "":
		spec.Allow = append(slices.Clip(spec.Allow), orchestrationTools...)
	}
	return spec
}

// AllowedPorts are the TCP ports the Agent's spec.tools.network opens to
// the tools' programs besides the sandbox's defaults. The schema bounds
// them to 1-65535; a value outside (an object that skipped validation) is
// left out, never wrapped around to another port.
func AllowedPorts(a *picobotv1alpha1.Agent) []uint16 {
	if a.Spec.Tools == nil || a.Spec.Tools.Network == nil {
		return nil
	}
	var out []uint16
	for _, p := range a.Spec.Tools.Network.AllowedPorts {
		if p >= 1 && p <= 65535 {
			out = append(out, uint16(p))
		}
	}
	return out
}

// ExecPolicy converts the Agent's spec.tools.exec into the shell tools'
// approval policy (security full, ask off when unset).
func ExecPolicy(a *picobotv1alpha1.Agent) approval.Policy {
	if a.Spec.Tools == nil || a.Spec.Tools.Exec == nil {
		return approval.Policy{Security: approval.SecurityFull, Ask: approval.AskOff}
	}
	e := a.Spec.Tools.Exec
	p := approval.Policy{Security: approval.Security(e.Security), Ask: approval.Ask(e.Ask), Allowlist: e.Allowlist}
	if e.ApprovalTimeout != nil {
		p.Timeout = e.ApprovalTimeout.Duration
	}
	return p
}

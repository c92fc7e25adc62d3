package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/user"
	"strings"

	"github.com/picobot/picobot/runtime/client"
)

// defaultGatewayURL is where `picobot serve` listens by default.
const defaultGatewayURL = "http://127.0.0.1:8080"

// usageError is a mistake on the command line (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// clientFlags are the flags `picobot ask` and `picobot chat` share.
type clientFlags struct {
	url, apiKey, agent, chat string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	url := os.Getenv("PICOBOT_URL")
	if url == "" {
		url = defaultGatewayURL
	}
	fs.StringVar(&f.url, "url", url, "Gateway URL ($PICOBOT_URL, else "+defaultGatewayURL+").")
	fs.StringVar(&f.apiKey, "api-key", os.Getenv("PICOBOT_API_KEY"), "API key ($PICOBOT_API_KEY).")
	fs.StringVar(&f.agent, "agent", "", "Agent to talk to (default: the only one).")
	fs.StringVar(&f.chat, "chat", defaultChatID(), "Chat id; the same id continues its conversations.")
}

// client checks the flags and returns a client of the gateway.
func (f *clientFlags) client() (*client.Client, error) {
	if err := client.CheckName("--chat", f.chat); err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	if f.agent != "" {
		if err := client.CheckName("--agent", f.agent); err != nil {
			return nil, &usageError{msg: err.Error()}
		}
	}
	c, err := client.New(f.url, client.Options{APIKey: f.apiKey})
	if err != nil {
		return nil, &usageError{msg: "--url: " + err.Error()}
	}
	return c, nil
}

// defaultChatID is cli-<user>, with characters a chat id may not hold
// replaced.
func defaultChatID() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "user"
	}
	return "cli-" + strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '-'
	}, name)
}

// errNoAgentChosen says the gateway has several agents and none was named.
var errNoAgentChosen = errors.New("several agents and no --agent")

// agentNames lists agents as "a, b (not ready)".
func agentNames(agents []client.Agent) string {
	names := make([]string, 0, len(agents))
	for _, a := range agents {
		n := a.Name
		if !a.Ready {
			n += " (not ready)"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// resolveAgent lists the gateway's agents and picks the one to talk to: the
// named one, else the only one; with several and none named it returns the
// list and errNoAgentChosen.
func resolveAgent(ctx context.Context, c *client.Client, want string) (string, []client.Agent, error) {
	agents, err := c.Agents(ctx)
	if err != nil {
		return "", nil, err
	}
	if want != "" {
		for _, a := range agents {
			if a.Name == want {
				return want, agents, nil
			}
		}
		return "", agents, &client.Error{Code: client.CodeUnknownAgent, Message: fmt.Sprintf("no agent %q", want)}
	}
	switch len(agents) {
	case 0:
		return "", agents, errors.New("the gateway has no agents: add an Agent manifest to the folder `picobot serve --dir` reads, then restart it")
	case 1:
		return agents[0].Name, agents, nil
	}
	return "", agents, errNoAgentChosen
}

// explain says in one line what went wrong and what to do about it.
func explain(err error, url string, agents []client.Agent) string {
	var ge *client.Error
	switch {
	case errors.Is(err, errNoAgentChosen):
		return fmt.Sprintf("the gateway has several agents (%s): pick one with --agent", agentNames(agents))
	case errors.Is(err, client.ErrUnreachable):
		return fmt.Sprintf("cannot reach the gateway at %s (%s): start it with `picobot serve`, or point --url (or PICOBOT_URL) at it", url, cause(err))
	case errors.Is(err, client.ErrConnectionLost):
		return fmt.Sprintf("lost the connection to the gateway at %s before the reply was complete (%s); the gateway may still finish it: `picobot chat` shows it", url, cause(err))
	case !errors.As(err, &ge):
		return err.Error()
	}
	switch ge.Code {
	case client.CodeUnauthorized:
		return fmt.Sprintf("the gateway at %s refused the API key: pass --api-key or set PICOBOT_API_KEY (%s)", url, ge.Message)
	case client.CodeUnknownAgent:
		if len(agents) == 0 {
			return ge.Message + ": pick an agent the gateway has with --agent"
		}
		return fmt.Sprintf("%s at %s: pick one of %s with --agent", ge.Message, url, agentNames(agents))
	case client.CodeNoModel:
		return ge.Message + " (see `picobot serve`'s log or GET " + url + "/api/v1/health)"
	case client.CodeBusy:
		return ge.Message + ": wait for the chat's running turn, stop it (/stop), or use another --chat"
	case client.CodeStopped:
		return "the turn was stopped; what it did so far is kept"
	case client.CodeRateLimited:
		return ge.Message + " (the API key's rate limit; try again shortly)"
	case client.CodeForbidden:
		return fmt.Sprintf("the gateway at %s does not serve this API key's tenant: %s", url, ge.Message)
	case "":
		return ge.Error()
	}
	return ge.Code + ": " + ge.Message
}

// cause is the network-level reason of an error ("connect: connection
// refused"), or the whole error when it has none.
func cause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

package fakellm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Demo answers like a small, predictable model, for `make run` without a
// key: it shows the agent's tools at work on a few kinds of request (a sum,
// a web page, a browser screenshot, a file, a shell command, something to
// remember and to recall, a scheduled run), picking only tools the agent
// declared, and then reports what the tool returned.
// Anything else gets a short note on what to try.
func Demo(r Recorded) Turn {
	if len(r.Messages) == 0 {
		return Turn{Text: demoHelp(r.Tools)}
	}
	last := r.Messages[len(r.Messages)-1]
	if len(last.ToolResults) > 0 || last.Role == "tool" {
		if call, ok := demoNext(r.Messages); ok {
			return Turn{Text: "Now " + call.Name + " again.", ToolCalls: []Call{call}}
		}
		return Turn{Text: demoReport(r.Messages)}
	}
	if last.Role != "user" {
		return Turn{Text: demoHelp(r.Tools)}
	}
	if call, ok := demoCall(last.Content, r.Tools); ok {
		return Turn{Text: "Let me use " + call.Name + ".", ToolCalls: []Call{call}}
	}
	return Turn{Text: demoHelp(r.Tools)}
}

var (
	demoSum      = regexp.MustCompile(`\d+(?:\.\d+)?(?:\s*[-+*/^%]\s*\(?\d+(?:\.\d+)?\)?)+`)
	demoURL      = regexp.MustCompile(`https?://[^\s"'<>]+`)
	demoRemember = regexp.MustCompile(`(?i)\bremember(?: that)?\s+(.+)`)
	demoRun      = regexp.MustCompile("(?i)\\brun\\s+`?([^`]+?)`?\\s*$")
	demoRecall   = regexp.MustCompile(`(?i)\bwhat do you (?:remember|know) about\s+(.+?)\??$`)
	demoEvery    = regexp.MustCompile(`(?i)\bevery\s+(\d+)\s+minutes?\s+(.+)`)
)

// demoNext is the second call of a two-step showcase: the screenshot of
// the page the browser just opened.
func demoNext(msgs []Message) (Call, bool) {
	var user string
	var prev Call
	for _, m := range msgs {
		if m.Role == "user" && len(m.ToolResults) == 0 {
			user = m.Content
		}
		if len(m.ToolCalls) > 0 {
			prev = m.ToolCalls[len(m.ToolCalls)-1]
		}
	}
	if prev.Name == "browser" && strings.Contains(prev.Args, `"open"`) && strings.Contains(strings.ToLower(user), "screenshot") {
		return Call{Name: "browser", Args: `{"action":"screenshot"}`}, true
	}
	return Call{}, false
}

// demoCall picks the tool call a request asks for, if the agent has it.
func demoCall(text string, tools []string) (Call, bool) {
	has := func(name string) bool { return slices.Contains(tools, name) }
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	lower := strings.ToLower(text)
	switch {
	case demoURL.MatchString(text) && strings.Contains(lower, "screenshot") && has("browser"):
		return Call{Name: "browser", Args: args(map[string]string{"action": "open", "url": strings.TrimRight(demoURL.FindString(text), ".,;)")})}, true
	case demoEvery.MatchString(text) && has("cron_add"):
		m := demoEvery.FindStringSubmatch(text)
		var minutes int64
		_, _ = fmt.Sscan(m[1], &minutes)
		return Call{Name: "cron_add", Args: args(map[string]any{"name": demoKey(m[2]), "prompt": strings.TrimSpace(m[2]),
			"schedule": map[string]any{"type": "every", "every_ms": max(minutes, 1) * 60_000}})}, true
	case demoRecall.MatchString(text) && has("memory_recall"):
		return Call{Name: "memory_recall", Args: args(map[string]string{"query": strings.TrimSpace(demoRecall.FindStringSubmatch(text)[1])})}, true
	case demoURL.MatchString(text) && has("web_fetch"):
		return Call{Name: "web_fetch", Args: args(map[string]string{"url": strings.TrimRight(demoURL.FindString(text), ".,;)")})}, true
	case demoRemember.MatchString(text) && has("memory_store"):
		fact := strings.TrimSpace(demoRemember.FindStringSubmatch(text)[1])
		return Call{Name: "memory_store", Args: args(map[string]string{"key": demoKey(fact), "content": fact})}, true
	case strings.Contains(lower, "file") && strings.Contains(lower, "write") && has("file_write"):
		return Call{Name: "file_write", Args: args(map[string]string{"path": "hello.md",
			"content": "# Hello\n\nWritten by PicoBot's demo model with the file_write tool.\n"})}, true
	case demoRun.MatchString(text) && has("bash"):
		return Call{Name: "bash", Args: args(map[string]string{"command": demoRun.FindStringSubmatch(text)[1]})}, true
	case demoSum.MatchString(text) && has("calculator"):
		return Call{Name: "calculator", Args: args(map[string]string{"function": "evaluate", "expression": demoSum.FindString(text)})}, true
	}
	return Call{}, false
}

// demoKey makes a memory key of the first words of a fact.
func demoKey(fact string) string {
	words := strings.FieldsFunc(strings.ToLower(fact), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
	if len(words) > 4 {
		words = words[:4]
	}
	if len(words) == 0 {
		return "fact"
	}
	return strings.Join(words, "_")
}

// demoReport says what the last tool calls returned.
func demoReport(msgs []Message) string {
	names := map[string]string{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
		}
	}
	// OpenAI sends one message per result, Anthropic one with them all.
	var results []ToolResult
	for i := len(msgs) - 1; i >= 0 && len(msgs[i].ToolResults) > 0; i-- {
		results = append(msgs[i].ToolResults, results...)
	}
	var b strings.Builder
	for _, tr := range results {
		content := strings.TrimSpace(tr.Content)
		if len(content) > 600 {
			content = content[:600] + " …"
		}
		verb := "returned"
		if tr.IsError {
			verb = "failed with"
		}
		fmt.Fprintf(&b, "The **%s** tool %s:\n\n```\n%s\n```\n\n", names[tr.CallID], verb, content)
	}
	b.WriteString("(I am PicoBot's demo model: I only show the tools at work. Set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one.)")
	return b.String()
}

// demoHelp lists what the demo can show with the agent's tools.
func demoHelp(tools []string) string {
	var tries []string
	for _, t := range []struct{ tool, try string }{
		{"calculator", "`what is 6*7?`"},
		{"web_fetch", "`fetch https://example.com`"},
		{"file_write", "`write a file`"},
		{"bash", "`run ls -la`"},
		{"memory_store", "`remember that my favourite colour is green`"},
		{"memory_recall", "`what do you remember about my favourite colour?`"},
		{"browser", "`take a screenshot of https://example.com`"},
		{"cron_add", "`every 5 minutes check the weather`"},
	} {
		if slices.Contains(tools, t.tool) {
			tries = append(tries, t.try)
		}
	}
	text := "Hello! I am PicoBot's demo model, not a real LLM: set OPENAI_API_KEY or ANTHROPIC_API_KEY and run `make run` again for one."
	if len(tries) > 0 {
		text += "\n\nTo see this agent's tools at work, try " + strings.Join(tries, ", ") + ". `/help` lists the commands."
	}
	return text
}

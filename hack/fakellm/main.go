// Command fakellm serves the scripted fake LLM (runtime/provider/fakellm) on a
// fixed address, speaking both the OpenAI and Anthropic wire protocols, for
// `make run` demos and manual testing without a model or an API key.
//
//	go run ./hack/fakellm --addr 127.0.0.1:8089 --reply "Hello from the fake model"
//	go run ./hack/fakellm --script turns.json   # then --reply, if given, forever
//	go run ./hack/fakellm --demo                # shows an agent's tools at work (fakellm.Demo)
//
// A script is a JSON array of turns, e.g.
//
//	[{"tool_calls":[{"name":"clock","args":"{}"}]},
//	 {"text":"It is noon.","delay":"1s","chunk_delay":"50ms"},
//	 {"status":429,"retry_after":"2"}]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8089", "address to listen on")
	reply := flag.String("reply", "", "text answered to every request once the script is used up")
	script := flag.String("script", "", "JSON file with an array of turns, answered in order")
	delay := flag.Duration("chunk-delay", 0, "delay between stream chunks of --reply answers")
	demo := flag.Bool("demo", false, "once the script is used up, answer like a small model that shows the agent's tools at work (make run)")
	flag.Parse()

	turns, err := loadScript(*script)
	if err != nil {
		return err
	}
	if len(turns) == 0 && *reply == "" && !*demo {
		*reply = "Hello from the fake model."
	}

	s, err := fakellm.Listen(*addr)
	if err != nil {
		return err
	}
	defer s.Close()
	s.Script(turns...)
	switch {
	case *demo:
		s.Respond(fakellm.Demo)
	case *reply != "":
		text, chunkDelay := *reply, *delay
		s.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: text, ChunkDelay: chunkDelay} })
	}

	fmt.Printf("fakellm serving %d scripted turn(s)", len(turns))
	switch {
	case *demo:
		fmt.Printf(", then the demo")
	case *reply != "":
		fmt.Printf(", then %q", *reply)
	}
	fmt.Printf("\n  OpenAI base URL:    %s\n  Anthropic base URL: %s\n", s.URL(), s.AnthropicURL())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Printf("fakellm: stopping after %d request(s)\n", len(s.Requests()))
	return nil
}

// scriptTurn is a Turn as written in a script file, with delays as
// duration strings ("50ms") instead of nanoseconds.
type scriptTurn struct {
	fakellm.Turn
	Delay      string `json:"delay,omitempty"`
	ChunkDelay string `json:"chunk_delay,omitempty"`
}

func loadScript(path string) ([]fakellm.Turn, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read script %q: %w", path, err)
	}
	var raw []scriptTurn
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("failed to parse script %q: %w", path, err)
	}
	turns := make([]fakellm.Turn, len(raw))
	for i, st := range raw {
		turns[i] = st.Turn
		for _, f := range []struct {
			name string
			text string
			dst  *time.Duration
		}{{"delay", st.Delay, &turns[i].Delay}, {"chunk_delay", st.ChunkDelay, &turns[i].ChunkDelay}} {
			if f.text == "" {
				continue
			}
			d, err := time.ParseDuration(f.text)
			if err != nil {
				return nil, fmt.Errorf("failed to parse %s of turn %d in %q: %w", f.name, i, path, err)
			}
			*f.dst = d
		}
	}
	return turns, nil
}

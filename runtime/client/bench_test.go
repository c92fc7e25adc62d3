package client_test

import (
	"context"
	"testing"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// BenchmarkAsk measures one message → final reply through the client: a
// WebSocket send to the real gateway over loopback, the embedded runtime, and
// the fake LLM answering at once.
func BenchmarkAsk(b *testing.B) {
	env := embeddedtest.Start(b, embeddedtest.Options{})
	env.LLM.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	c, err := client.New(env.URL, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	conn, err := c.Dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	b.ResetTimer()
	for b.Loop() {
		reply, err := conn.Ask(ctx, client.Send{Agent: "assistant", ChatID: "bench", Text: "hello"}, nil)
		if err != nil || reply.Text != "ok" {
			b.Fatalf("reply %+v, error %v", reply, err)
		}
	}
}

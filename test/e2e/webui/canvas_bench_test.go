package webui

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// counterSurface is an A2UI v0.8 surface showing "count n" and a button
// whose action carries n.
func counterSurface(n int) string {
	return fmt.Sprintf(`{"surfaceUpdate":{"surfaceId":"counter","components":[`+
		`{"id":"root","component":{"Column":{"children":{"explicitList":["count","more"]}}}},`+
		`{"id":"count","component":{"Text":{"text":{"literalString":"count %d"}}}},`+
		`{"id":"more-label","component":{"Text":{"text":{"literalString":"More"}}}},`+
		`{"id":"more","component":{"Button":{"child":"more-label","action":{"name":"more","context":[{"key":"n","value":{"literalNumber":%d}}]}}}}]}}`+"\n"+
		`{"beginRendering":{"surfaceId":"counter","root":"root"}}`, n, n)
}

// BenchmarkWebUICanvasA2UIRoundTrip measures, in headless Chromium against
// `picobot serve` and a fake model that answers at once, an A2UI round
// trip: from a click on a surface's button to the surface the agent pushes
// in answer being rendered (the click's message, a model call, the canvas
// tool's a2ui_push, its event to the page, the render). It reports the p50
// and p99 in milliseconds.
func BenchmarkWebUICanvasA2UIRoundTrip(b *testing.B) {
	llm := fakellm.New()
	b.Cleanup(llm.Close)
	dir := b.TempDir()
	canvasAgent(b, dir, llm.URL())
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			return fakellm.Turn{Text: "ok"}
		}
		n := 0
		if rest, ok := strings.CutPrefix(last.Content, "[canvas action] "); ok {
			var a struct {
				UserAction struct{ Context struct{ N int } }
			}
			_ = json.Unmarshal([]byte(rest), &a)
			n = a.UserAction.Context.N + 1
		}
		args, _ := json.Marshal(map[string]string{"action": "a2ui_push", "jsonl": counterSurface(n)})
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "canvas", Args: string(args)}}}
	})
	srv := serve(b, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	u := openUI(b, launchBrowser(b), srv.url+"/", shotsDir(b))
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.send("start the counter")
	u.waitLastTurn("done")
	roundTrip := `async (n) => {
	  const surface = '#canvas-surfaces [data-surface-id="counter"]';
	  const want = 'count ' + (n + 1);
	  for (;;) { // the previous turn has ended and the page takes a click
	    const t = document.querySelector('#messages .turn:last-child');
	    if (t && t.dataset.status === 'done' && !document.getElementById('send').disabled) break;
	    await new Promise((r) => setTimeout(r, 1));
	  }
	  const t0 = performance.now();
	  document.querySelector(surface + ' button.a2ui-Button').click();
	  for (;;) {
	    const c = document.querySelector(surface + ' [data-id="count"]');
	    if (c && c.textContent === want) return performance.now() - t0;
	    await new Promise((r) => setTimeout(r, 1));
	  }
	}`
	u.eval(roundTrip, 0) // warm up
	lat := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, u.eval(roundTrip, i+1).Num())
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "ms-p50")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "ms-p99")
	if p := u.problems(); len(p) > 0 {
		b.Fatalf("the page hit problems: %v", p)
	}
}

// BenchmarkWebUICanvasEval measures, in headless Chromium against `picobot
// serve`, the round trip of the canvas tool's eval: from the page showing
// the tool call (its canvas event arrives just after) to the page showing
// its result (the code run in the sandboxed frame, the answer sent to the
// gateway, handed to the waiting tool, its result event back). It reports
// the p50 and p99 in milliseconds.
func BenchmarkWebUICanvasEval(b *testing.B) {
	llm := fakellm.New()
	b.Cleanup(llm.Close)
	dir := b.TempDir()
	canvasAgent(b, dir, llm.URL())
	llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if r.Messages[len(r.Messages)-1].Role == "tool" {
			return fakellm.Turn{Text: "ok"}
		}
		return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "canvas", Args: `{"action":"eval","javaScript":"document.body.textContent = String(Date.now()); 6*7"}`}}}
	})
	srv := serve(b, dir, "PICOBOT_SECRET_MODEL_API_KEY_APIKEY=sk-test")
	u := openUI(b, launchBrowser(b), srv.url+"/", shotsDir(b))
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the ready agent to be chosen", `() => document.getElementById('agent-select').value === 'assistant'`)
	roundTrip := `async (text) => {
	  const before = document.querySelectorAll('#messages .tool-call').length;
	  if (!window.PicoBotApp.submit(text)) throw new Error('the UI did not send ' + text);
	  let t0 = 0;
	  for (;;) {
	    const calls = document.querySelectorAll('#messages .tool-call');
	    const c = calls.length > before ? calls[calls.length - 1] : null;
	    if (c && !t0) t0 = performance.now();
	    if (c && !c.classList.contains('pending')) {
	      if (c.classList.contains('error')) throw new Error('eval failed: ' + c.textContent);
	      const ms = performance.now() - t0;
	      for (;;) { // the turn ends before the next
	        const t = document.querySelector('#messages .turn:last-child');
	        if (t && t.dataset.status === 'done' && !document.getElementById('send').disabled) return ms;
	        await new Promise((r) => setTimeout(r, 1));
	      }
	    }
	    await new Promise((r) => setTimeout(r, 1));
	  }
	}`
	u.eval(roundTrip, "warm up")
	lat := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, u.eval(roundTrip, fmt.Sprintf("eval %d", i)).Num())
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "ms-p50")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "ms-p99")
	if p := u.problems(); len(p) > 0 {
		b.Fatalf("the page hit problems: %v", p)
	}
}

package webui

import (
	"fmt"
	"slices"
	"testing"
)

// BenchmarkWebUITurn measures, in headless Chromium, the time from the UI
// submitting a message to the reply being rendered on the page, against
// `picobot serve` and a fake model that answers at once: the latency a user
// sees that is not the model's. It reports the p50 and p99 in milliseconds.
func BenchmarkWebUITurn(b *testing.B) {
	e := start(b)
	u := openUI(b, e.browser, e.serve.url+"/", e.shots)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the ready agent to be chosen", `() => document.getElementById('agent-select').value === 'assistant'`)
	turn := `async (text) => {
	  const want = 'You said: ' + text;
	  const t0 = performance.now();
	  if (!window.PicoBotApp.submit(text)) throw new Error('the UI did not send ' + text);
	  for (;;) {
	    const t = document.querySelector('#messages .turn:last-child');
	    const c = t && t.querySelector('.content');
	    if (t && t.dataset.status === 'done' && c && c.textContent === want && !document.getElementById('send').disabled) {
	      return performance.now() - t0;
	    }
	    await new Promise((r) => setTimeout(r, 1));
	  }
	}`
	u.eval(turn, "warm up")
	lat := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, u.eval(turn, fmt.Sprintf("ping %d", i)).Num())
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "ms-p50")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "ms-p99")
	if p := u.problems(); len(p) > 0 {
		b.Fatalf("the page hit problems: %v", p)
	}
}

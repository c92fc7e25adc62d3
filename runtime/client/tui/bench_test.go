package tui

import (
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/picobot/picobot/runtime/client"
)

// longTranscript is a dialog of n exchanges, each with a tool call.
func longTranscript(n int) transcript {
	var t transcript
	for i := range n {
		t.add(entry{kind: entryUser, text: fmt.Sprintf("question %d: %s", i, strings.Repeat("words ", 20))})
		t.add(entry{kind: entryTool, callID: fmt.Sprint(i), name: "web_fetch", args: `{"url":"https://example.com/page"}`, result: strings.Repeat("result ", 50), hasResult: true})
		t.add(entry{kind: entryAssistant, text: strings.Repeat("An answer that wraps over a few lines of the terminal. ", 6)})
	}
	return t
}

// BenchmarkStreamDelta measures what streamed deltas cost the UI on a dialog
// of 100 exchanges: one op streams a reply of 100 words (100 deltas), each
// through Update (transcript, layout) and View, like a terminal redraw.
func BenchmarkStreamDelta(b *testing.B) {
	const deltas = 100
	m := New(Config{Agent: "assistant", ChatID: "bench"})
	m.log = longTranscript(100)
	turn := &client.Turn{}
	m.turn = turn
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	ev := eventMsg{turn: turn, ev: client.Event{Kind: client.KindDelta, Text: "word "}}
	b.ResetTimer()
	for b.Loop() {
		for range deltas {
			tm, _ = tm.Update(ev)
			_ = tm.View()
		}
		b.StopTimer()
		mm := tm.(Model)
		mm.log.entries = mm.log.entries[:len(mm.log.entries)-1] // drop the reply for the next op
		tm = mm
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/delta")
}

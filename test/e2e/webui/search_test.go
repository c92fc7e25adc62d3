package webui

import (
	"testing"

	"github.com/go-rod/rod/lib/input"
	. "github.com/onsi/gomega"
)

// TestWebUISearch searches the conversation list in headless Chromium: the
// gateway's full-text search finds the words typed in every conversation of
// the chat, the hits replace the list while a query is typed, a click opens
// the conversation at the message, Escape brings the list back; checked
// for layout at 1280x800 and 390x844.
func TestWebUISearch(t *testing.T) {
	g := NewWithT(t)
	e := start(t)
	u := openUI(t, e.browser, e.serve.url+"/", e.shots)
	u.page.MustSetViewport(1280, 800, 1, false)
	u.wait("the WebSocket to connect", `() => document.getElementById('conn-status').dataset.state === 'open'`)
	u.wait("the ready agent to be chosen", `() => document.getElementById('agent-select').value === 'assistant'`)
	u.send("plan a trip to Hangzhou in spring")
	u.waitLastTurn("done")
	u.send("and what about the tea fields?")
	u.waitLastTurn("done")
	u.click("#new-dialog")
	u.wait("the new conversation", `() => document.querySelectorAll('#sessions li.session-row').length === 2 && !document.querySelector('#messages .turn')`)
	u.send("buy milk and bread")
	u.waitLastTurn("done")

	u.el("#session-search").MustInput("hangz")
	u.wait("two hits: the message and its answer", `() => document.querySelectorAll('#search-results .search-hit').length === 2`)
	g.Expect(u.eval(`() => document.getElementById('sessions').hidden`).Bool()).To(BeTrue(), "the hits replace the list")
	g.Expect(u.eval(`() => [...document.querySelectorAll('#search-results .search-hit-snippet')].map((e) => e.textContent).join('|')`).Str()).
		To(Equal("You said: plan a trip to Hangzhou in spring|You: plan a trip to Hangzhou in spring"))
	g.Expect(u.text("#search-results .search-hit-title")).To(Equal("plan a trip to Hangzhou in spring"))
	u.shot("search-hits")

	u.click(`#search-results .search-hit:last-child`)
	u.wait("the conversation opened at the message", `() => {
	  const f = document.querySelector('#messages .turn.found');
	  return f && f.textContent.includes('plan a trip to Hangzhou') && window.PicoBotApp.currentDialog === 'default';
	}`)
	g.Expect(u.text("#messages")).To(ContainSubstring("tea fields"))
	u.shot("search-opened")

	u.el("#session-search").MustSelectAllText().MustInput("nothing like this")
	u.wait("no hits said so", `() => document.querySelector('#search-results .search-empty') !== null`)
	g.Expect(u.text("#search-results")).To(Equal("No message holds “nothing like this”."))
	u.el("#session-search").MustKeyActions().Type(input.Escape).MustDo()
	u.wait("the list back", `() => !document.getElementById('sessions').hidden && document.getElementById('search-results').hidden`)

	// At 390x844 the search sits in the drawer and nothing overflows.
	u.page.MustSetViewport(390, 844, 1, true)
	u.click("#sidebar-toggle")
	u.wait("the drawer open", `() => document.getElementById('app').dataset.sidebar === 'open'`)
	u.el("#session-search").MustInput("milk")
	u.wait("the message and its answer", `() => document.querySelectorAll('#search-results .search-hit').length === 2`)
	g.Expect(u.eval(`() => {
	  const s = document.getElementById('sidebar').getBoundingClientRect();
	  return document.documentElement.scrollWidth <= innerWidth &&
	    [...document.querySelectorAll('#search-results .search-hit, #session-search')].every((e) => e.getBoundingClientRect().right <= s.right + 0.5);
	}`).Bool()).To(BeTrue(), "the hits fit the drawer")
	u.shot("search-mobile")
	g.Expect(u.problems()).To(BeEmpty(), "no script errors or CSP violations")
}

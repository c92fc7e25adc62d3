package web

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	testingclock "k8s.io/utils/clock/testing"
)

func TestTTLCacheIsBoundedLRU(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakePassiveClock(time.Unix(0, 0))
	c := newTTLCache[page](clk, 15*time.Minute, 3)
	for i := range 3 {
		c.put(fmt.Sprint(i), page{text: fmt.Sprint(i)})
	}
	_, _, ok := c.get("0") // 0 becomes the most recently used
	g.Expect(ok).To(BeTrue())
	c.put("3", page{text: "3"}) // evicts 1, the least recently used
	g.Expect(c.len()).To(Equal(3))
	_, _, ok = c.get("1")
	g.Expect(ok).To(BeFalse())
	for _, k := range []string{"0", "2", "3"} {
		p, _, ok := c.get(k)
		g.Expect(ok).To(BeTrue(), k)
		g.Expect(p.text).To(Equal(k))
	}

	clk.SetTime(clk.Now().Add(15 * time.Minute))
	_, _, ok = c.get("0")
	g.Expect(ok).To(BeFalse(), "entries expire after the TTL")
	g.Expect(c.len()).To(Equal(2))

	off := newTTLCache[page](clk, 0, 3)
	off.put("a", page{})
	_, _, ok = off.get("a")
	g.Expect(ok).To(BeFalse(), "a zero TTL disables the cache")
}

func TestHTMLToText(t *testing.T) {
	cases := []struct {
		name, html, want string
	}{
		{"paragraphs", "<p>a  b</p><p>c</p>", "a b\n\nc"},
		{"inline", "<p>x <b>y</b> <i>z</i>.</p>", "x y z."},
		{"br", "<p>one<br>two</p>", "one\ntwo"},
		{"list", "<ul><li>a</li><li>b <a href='/x'>link</a></li></ul>", "- a\n- b link"},
		{"nested divs", "<div><div><p>a</p></div></div><div>b</div>", "a\n\nb"},
		{"table", "<table><tr><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr></table>", "1\t2\n3\t4"},
		{"pre", "<pre>a\n  b</pre>", "a\n  b"},
		{"skipped", "<script>x()</script><style>p{}</style><p>ok</p><noscript>js</noscript>", "ok"},
		{"image alt", "<p>see <img src=a.png alt='a cat'></p>", "see [a cat]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, text, err := extractHTML([]byte(tc.html), "https://x.example/", ModeText)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(text).To(Equal(tc.want))
		})
	}
}

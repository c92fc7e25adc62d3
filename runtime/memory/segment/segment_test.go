package segment

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestQueryTerms(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string
	}{
		{"Chinese run as bigrams", "我喜欢猫", []string{"我喜", "喜欢", "欢猫"}},
		{"single Han character", "猫", []string{"猫"}},
		{"Chinese stop character alone", "的", nil},
		{"English words, lower-cased, stop-words dropped", "The Cat is on the MAT", []string{"cat", "mat"}},
		{"mixed scripts split at the boundary", "去Kyoto看樱花2026年", []string{"去", "kyoto", "看樱", "樱花", "2026", "年"}},
		{"punctuation separates runs", "火锅，麻辣。hot-pot!", []string{"火锅", "麻辣", "hot", "pot"}},
		{"full-width letters and digits fold", "ＮＥＯＶＩＭ１２", []string{"neovim12"}},
		{"duplicates once", "cat cat 猫猫 猫猫", []string{"cat", "猫猫"}},
		{"single letters dropped", "a b c x y", nil},
		{"only punctuation and syntax", `"*" OR ( ) : ^ - ' \ % _ ; --`, nil},
		{"kana as bigrams", "ラーメン", []string{"ラー", "ーメ", "メン"}},
		{"hangul as words", "김치 찌개", []string{"김치", "찌개"}},
		{"accents kept", "Café Zürich", []string{"café", "zürich"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := QueryTerms(c.in)
			if len(c.want) == 0 {
				NewWithT(t).Expect(got).To(BeEmpty())
				return
			}
			NewWithT(t).Expect(got).To(Equal(c.want))
		})
	}
}

func TestTermsBoundsAndPositions(t *testing.T) {
	g := NewWithT(t)
	ts := Terms("alpha beta alpha gamma", 0)
	g.Expect(ts).To(Equal([]Term{{"alpha", 0}, {"beta", 1}, {"gamma", 3}}), "first positions, counting repeats")

	long := strings.Repeat("x", 200) + " " + strings.Repeat("汉", 3)
	ts = Terms(long, 0)
	g.Expect(ts[0].Text).To(HaveLen(MaxTermBytes))
	g.Expect(ts[1:]).To(Equal([]Term{{"汉汉", 1}}))

	var q strings.Builder
	for i := range 100 {
		fmt.Fprintf(&q, "w%d ", i)
	}
	g.Expect(QueryTerms(q.String())).To(HaveLen(MaxQueryTerms))
	var b strings.Builder
	for i := range 10000 {
		b.WriteString("w")
		b.WriteString(strings.Repeat("z", i%50+2))
		b.WriteString(" ")
	}
	g.Expect(len(Terms(b.String(), MaxIndexTerms))).To(BeNumerically("<=", MaxIndexTerms))
	g.Expect(clip(strings.Repeat("汉", 30))).To(Equal(strings.Repeat("汉", 21)), "cut on a rune boundary")
}

func TestWords(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Words("Mis 樱 the %iso_ 京都旅行 x 的", 8)).To(Equal([]string{"mis", "樱", "iso", "京", "旅", "行"}))
	g.Expect(Words("能吃虾吗iPhone15", 8)).To(Equal([]string{"吃", "虾", "iphone15"}), "能 and 吗 are stop characters")
	g.Expect(Words("one two three four", 2)).To(Equal([]string{"one", "two"}))
	g.Expect(Words("!!! 。。", 8)).To(BeEmpty())
}

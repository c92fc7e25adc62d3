package quota_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/quota"
)

func TestPriceLookup(t *testing.T) {
	g := NewWithT(t)
	p := quota.DefaultPrices()
	for model, want := range map[string]string{
		"openai/gpt-4o":                        "openai/gpt-4o",
		"openai/gpt-4o-2024-08-06":             "openai/gpt-4o",
		"OpenAI/GPT-4o-mini-2024-07-18":        "openai/gpt-4o-mini",
		"anthropic/claude-sonnet-4-5-20250929": "anthropic/claude-sonnet-4-5",
		"anthropic/claude-sonnet-4-20250514":   "anthropic/claude-sonnet-4",
		"anthropic/claude-3-5-haiku-latest":    "anthropic/claude-3-5-haiku",
		"openai/gpt-5-mini":                    "openai/gpt-5-mini",
		"openai/gpt-4.1-nano-2025-04-14":       "openai/gpt-4.1-nano",
	} {
		got, ok := p.Lookup(model)
		g.Expect(ok).To(BeTrue(), model)
		g.Expect(got).To(Equal(p[want]), model)
	}
	for _, model := range []string{"openai/gpt-5.2", "openai/gpt-4oz", "ollama/llama3", ""} {
		_, ok := p.Lookup(model)
		g.Expect(ok).To(BeFalse(), "%q is not priced by a shorter name", model)
	}
}

func TestPriceCost(t *testing.T) {
	g := NewWithT(t)
	p := quota.Price{Input: 3_000_000, CachedInput: 300_000, Output: 15_000_000}
	g.Expect(p.Cost(llm.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000})).To(Equal(int64(18_000_000)))
	g.Expect(p.Cost(llm.Usage{InputTokens: 1_000_000, CachedInputTokens: 1_000_000})).To(Equal(int64(300_000)))
	g.Expect(p.Cost(llm.Usage{InputTokens: 1})).To(Equal(int64(3)), "rounded up, never free")
	g.Expect(quota.Price{Input: 1_000_000}.Cost(llm.Usage{InputTokens: 10, CachedInputTokens: 10})).To(Equal(int64(10)), "no cached price: the input price")
	g.Expect(quota.Money(12_345_001)).To(Equal("12.35"))
	g.Expect(quota.Money(0)).To(Equal("0.00"))
}

func TestParsePrices(t *testing.T) {
	g := NewWithT(t)
	p, err := quota.ParsePrices("# our contract\nopenai/gpt-4o: 2 8 1  # cheaper\n\nvllm/qwen3: 0 0\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(quota.Prices{"openai/gpt-4o": {Input: 2_000_000, Output: 8_000_000, CachedInput: 1_000_000}, "vllm/qwen3": {}}))
	g.Expect(quota.DefaultPrices().With(p)["openai/gpt-4o"].Input).To(Equal(int64(2_000_000)), "the table's prices win")
	for text, want := range map[string]string{
		"gpt-4o: 1 2":          `line 1: want "provider/model: input output [cachedInput]"`,
		"openai/gpt-4o: 1":     "line 1 (openai/gpt-4o): want 2 or 3 prices",
		"openai/gpt-4o: 1 two": `line 1 (openai/gpt-4o): "two" is not a price`,
		"openai/gpt-4o: 1 -2":  `"-2" is not a price`,
		"a/b: 1 2\nA/B: 3 4":   "line 2: a/b is priced twice",
	} {
		_, err := quota.ParsePrices(text)
		g.Expect(err).To(MatchError(ContainSubstring(want)), text)
	}
}

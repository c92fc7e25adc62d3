// Package quota accounts what a tenant's agents use (tokens, their cost,
// model and tool calls) in the store and refuses model calls once the
// tenant's budget for the day or the month is spent.
package quota

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/picobot/picobot/runtime/llm"
)

// Price is what a model costs per million tokens, in millionths of the
// price table's currency unit (USD in the defaults): 2.50 USD is 2_500_000.
type Price struct {
	Input       int64 `json:"input"`
	CachedInput int64 `json:"cachedInput"`
	Output      int64 `json:"output"`
}

// Cost is what u costs at p, in millionths of the currency unit, rounded
// up so that many small calls are never free.
func (p Price) Cost(u llm.Usage) int64 {
	cached := min(max(u.CachedInputTokens, 0), max(u.InputTokens, 0))
	fresh := max(u.InputTokens, 0) - cached
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	total := float64(fresh)*float64(p.Input) + float64(cached)*float64(cachedPrice) + float64(max(u.OutputTokens, 0))*float64(p.Output)
	return int64(math.Ceil(total / 1e6))
}

// Prices maps "provider/model" to its price. A model name matches the
// longest key it starts with, so "openai/gpt-4o" prices the dated
// snapshots "openai/gpt-4o-2024-08-06" too (and "openai/gpt-4o-mini" has a
// key of its own).
type Prices map[string]Price

// usd is dollars per million tokens as millionths.
func usd(dollars float64) int64 { return int64(math.Round(dollars * 1e6)) }

// DefaultPrices are the list prices (USD per million tokens) of common
// OpenAI and Anthropic models as published by the providers when this
// table was written (docs/quotas.md). Prices change: a platform team's own
// table (ParsePrices) is laid over these with With.
func DefaultPrices() Prices {
	return Prices{
		"openai/gpt-4o":               {Input: usd(2.50), CachedInput: usd(1.25), Output: usd(10)},
		"openai/gpt-4o-mini":          {Input: usd(0.15), CachedInput: usd(0.075), Output: usd(0.60)},
		"openai/gpt-4.1":              {Input: usd(2), CachedInput: usd(0.50), Output: usd(8)},
		"openai/gpt-4.1-mini":         {Input: usd(0.40), CachedInput: usd(0.10), Output: usd(1.60)},
		"openai/gpt-4.1-nano":         {Input: usd(0.10), CachedInput: usd(0.025), Output: usd(0.40)},
		"openai/o3":                   {Input: usd(2), CachedInput: usd(0.50), Output: usd(8)},
		"openai/o4-mini":              {Input: usd(1.10), CachedInput: usd(0.275), Output: usd(4.40)},
		"openai/gpt-5":                {Input: usd(1.25), CachedInput: usd(0.125), Output: usd(10)},
		"openai/gpt-5-mini":           {Input: usd(0.25), CachedInput: usd(0.025), Output: usd(2)},
		"openai/gpt-5-nano":           {Input: usd(0.05), CachedInput: usd(0.005), Output: usd(0.40)},
		"anthropic/claude-opus-4":     {Input: usd(15), CachedInput: usd(1.50), Output: usd(75)},
		"anthropic/claude-opus-4-5":   {Input: usd(5), CachedInput: usd(0.50), Output: usd(25)},
		"anthropic/claude-sonnet-4":   {Input: usd(3), CachedInput: usd(0.30), Output: usd(15)},
		"anthropic/claude-haiku-4-5":  {Input: usd(1), CachedInput: usd(0.10), Output: usd(5)},
		"anthropic/claude-3-5-haiku":  {Input: usd(0.80), CachedInput: usd(0.08), Output: usd(4)},
		"anthropic/claude-3-7-sonnet": {Input: usd(3), CachedInput: usd(0.30), Output: usd(15)},
		"anthropic/claude-3-5-sonnet": {Input: usd(3), CachedInput: usd(0.30), Output: usd(15)},
		"anthropic/claude-3-opus":     {Input: usd(15), CachedInput: usd(1.50), Output: usd(75)},
		"anthropic/claude-3-haiku":    {Input: usd(0.25), CachedInput: usd(0.03), Output: usd(1.25)},
		"openai/gpt-4-turbo":          {Input: usd(10), Output: usd(30)},
		"openai/gpt-3.5-turbo":        {Input: usd(0.50), Output: usd(1.50)},
		"anthropic/claude-sonnet-4-5": {Input: usd(3), CachedInput: usd(0.30), Output: usd(15)},
		"anthropic/claude-opus-4-1":   {Input: usd(15), CachedInput: usd(1.50), Output: usd(75)},
		"openai/o3-mini":              {Input: usd(1.10), CachedInput: usd(0.55), Output: usd(4.40)},
		"openai/o1":                   {Input: usd(15), CachedInput: usd(7.50), Output: usd(60)},
		"openai/o1-mini":              {Input: usd(1.10), CachedInput: usd(0.55), Output: usd(4.40)},
	}
}

// Lookup returns the price of model ("provider/model"): the longest key
// it starts with. ok is false for a model the table does not price.
func (p Prices) Lookup(model string) (Price, bool) {
	model = strings.ToLower(strings.TrimSpace(model))
	if pr, ok := p[model]; ok {
		return pr, true
	}
	best, found := "", false
	for k := range p {
		if len(k) > len(best) && strings.HasPrefix(model, k) && boundary(model, len(k)) {
			best, found = k, true
		}
	}
	if !found {
		return Price{}, false
	}
	return p[best], true
}

// boundary reports whether a key of length n ends model at a word: the
// end or a '-' ("gpt-4o" prices "gpt-4o-2024-08-06", not "gpt-4oz").
func boundary(model string, n int) bool {
	return n == len(model) || model[n] == '-'
}

// ParsePrices reads a price table: one "provider/model: input output
// [cachedInput]" line per model, in currency units per million tokens
// ("openai/gpt-4o: 2.50 10 1.25"); '#' starts a comment.
func ParsePrices(text string) (Prices, error) {
	out := Prices{}
	for i, line := range strings.Split(text, "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok || !strings.Contains(name, "/") {
			return nil, fmt.Errorf("line %d: want \"provider/model: input output [cachedInput]\", got %q", i+1, line)
		}
		f := strings.Fields(rest)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d (%s): want 2 or 3 prices per million tokens (input output [cachedInput]), got %d", i+1, name, len(f))
		}
		var v [3]int64
		for k, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) || x > 1e6 {
				return nil, fmt.Errorf("line %d (%s): %q is not a price (a number from 0 to 1000000)", i+1, name, s)
			}
			v[k] = usd(x)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("line %d: %s is priced twice", i+1, name)
		}
		out[name] = Price{Input: v[0], Output: v[1], CachedInput: v[2]}
	}
	return out, nil
}

// With returns p with the prices of q added (q's win).
func (p Prices) With(q Prices) Prices {
	out := make(Prices, len(p)+len(q))
	for k, v := range p {
		out[k] = v
	}
	for k, v := range q {
		out[k] = v
	}
	return out
}

// Names lists the priced models, sorted.
func (p Prices) Names() []string {
	out := make([]string, 0, len(p))
	for k := range p {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

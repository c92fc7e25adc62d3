package quota

import (
	"fmt"
	"strconv"
	"strings"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// PricesKey is the key of a TenantQuota's pricesConfigMap that holds the
// price table (ParsePrices format).
const PricesKey = "prices"

// DefaultSoftLimitPercent is the CRD's default of budget.softLimitPercent.
const DefaultSoftLimitPercent = 80

// ParseMoney reads a decimal amount of the currency unit ("12.50", "300",
// at most 6 decimals) as millionths, exactly (no float rounding).
func ParseMoney(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || len(frac) > 6 || (strings.Contains(s, ".") && frac == "") {
		return 0, fmt.Errorf("%q is not an amount such as 12.50 (at most 12 digits and 6 decimals)", s)
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an amount such as 12.50 (at most 12 digits and 6 decimals)", s)
	}
	f := uint64(0)
	if frac != "" {
		if f, err = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("%q is not an amount such as 12.50 (at most 12 digits and 6 decimals)", s)
		}
	}
	return int64(w*1_000_000 + f), nil
}

// BudgetOf is the budget a TenantQuota sets; nil (no quota) is no budget.
// The API server (and the manifest loader) validated the spec, so an error
// means a spec that skipped validation.
func BudgetOf(q *picobotv1alpha1.TenantQuota) (Budget, error) {
	if q == nil || q.Spec.Budget == nil {
		return Budget{}, nil
	}
	s := q.Spec.Budget
	b := Budget{SoftLimitPercent: DefaultSoftLimitPercent}
	if s.SoftLimitPercent != nil {
		b.SoftLimitPercent = int64(*s.SoftLimitPercent)
	}
	if s.DayTokens != nil {
		b.DayTokens = *s.DayTokens
	}
	if s.MonthTokens != nil {
		b.MonthTokens = *s.MonthTokens
	}
	for _, c := range []struct {
		field string
		v     *string
		dst   *int64
	}{{"dayCost", s.DayCost, &b.DayCostMicros}, {"monthCost", s.MonthCost, &b.MonthCostMicros}} {
		if c.v == nil {
			continue
		}
		m, err := ParseMoney(*c.v)
		if err != nil {
			return Budget{}, fmt.Errorf("failed to read spec.budget.%s of TenantQuota %s/%s: %w", c.field, q.Namespace, q.Name, err)
		}
		*c.dst = m
	}
	return b, nil
}

// PricesOf is the price table of a pricesConfigMap's data: the built-in
// prices with the ConfigMap's key "prices" laid over them.
func PricesOf(configMap string, data map[string]string) (Prices, error) {
	text, ok := data[PricesKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %q has no key %q (one \"provider/model: input output [cachedInput]\" line per model)", configMap, PricesKey)
	}
	p, err := ParsePrices(text)
	if err != nil {
		return nil, fmt.Errorf("failed to read the price table of ConfigMap %q: %w", configMap, err)
	}
	return DefaultPrices().With(p), nil
}

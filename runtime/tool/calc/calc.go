// Package calc implements calculator, which gives the model exact arithmetic
// and statistics instead of letting it estimate numbers in its head.
package calc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/picobot/picobot/runtime/tool"
)

// Args are the arguments of calculator. Optional numbers are pointers so a
// missing parameter is told apart from 0.
type Args struct {
	Function   string    `json:"function" jsonschema:"The calculation to perform; percentage_change answers in percent"`
	Expression string    `json:"expression,omitempty" jsonschema:"evaluate: arithmetic with + - * / % ^ and parentheses, functions sqrt abs ln log log10 log2 exp pow floor ceil round sin cos tan asin acos atan min max, constants pi e"`
	Values     []float64 `json:"values,omitempty" jsonschema:"The numbers for sum, count, range, average, median, mode, stdev, variance, min, max and percentile"`
	X          *float64  `json:"x,omitempty" jsonschema:"The number for log, factorial, round and clamp"`
	Base       *float64  `json:"base,omitempty" jsonschema:"log: the base (default 10)"`
	Decimals   *int      `json:"decimals,omitempty" jsonschema:"round: digits after the decimal point (default 0)"`
	A          *float64  `json:"a,omitempty" jsonschema:"percentage_change: the old value"`
	B          *float64  `json:"b,omitempty" jsonschema:"percentage_change: the new value"`
	P          *float64  `json:"p,omitempty" jsonschema:"percentile: which percentile, 0-100"`
	MinVal     *float64  `json:"min_val,omitempty" jsonschema:"clamp: the lower bound"`
	MaxVal     *float64  `json:"max_val,omitempty" jsonschema:"clamp: the upper bound"`
}

// functionNames are the values of Args.Function.
var functionNames = []string{
	"evaluate", "sum", "count", "range", "average", "median", "mode", "stdev", "variance",
	"min", "max", "log", "factorial", "round", "percentage_change", "percentile", "clamp",
}

// New returns the calculator tool.
func New() tool.Tool {
	enum := make([]any, len(functionNames))
	for i, f := range functionNames {
		enum[i] = f
	}
	return tool.New("calculator",
		"Exact arithmetic and statistics. Choose function and pass the parameters it uses (each parameter says which functions read it).",
		calculate,
		tool.ReadOnly(),
		tool.Enum("function", enum...),
		tool.Range("decimals", tool.Bound(0), tool.Bound(15)),
		tool.Range("p", tool.Bound(0), tool.Bound(100)),
	)
}

func calculate(_ context.Context, _ tool.Env, a Args) (tool.Result, error) {
	out, err := compute(a)
	if err != nil {
		msg := fmt.Sprintf("error: %s: %v.", a.Function, err)
		if a.Function == "evaluate" {
			msg += " Fix the expression and call calculator again."
		}
		return tool.Errorf("%s", msg), nil
	}
	return tool.Text(out), nil
}

// compute runs the chosen function and formats its result.
func compute(a Args) (string, error) {
	switch a.Function {
	case "evaluate":
		return computeEvaluate(a)
	case "sum", "count", "range", "average", "median", "mode", "stdev", "variance", "min", "max", "percentile":
		return statistic(a)
	case "log":
		return computeLog(a)
	case "factorial":
		return computeFactorial(a)
	case "round":
		return computeRound(a)
	case "percentage_change":
		return computePercentageChange(a)
	case "clamp":
		return computeClamp(a)
	}
	return "", fmt.Errorf("unknown function; use one of %s", strings.Join(functionNames, ", "))
}

// computeEvaluate evaluates the arithmetic expression.
func computeEvaluate(a Args) (string, error) {
	if strings.TrimSpace(a.Expression) == "" {
		return "", errors.New("expression is required, e.g. \"(2+3)*4^2\"")
	}
	v, err := evaluate(a.Expression)
	if err != nil {
		return "", err
	}
	return format(v), nil
}

// computeLog takes the logarithm of x to base, 10 when no base is given.
func computeLog(a Args) (string, error) {
	x, err := need(a.X, "x")
	if err != nil {
		return "", err
	}
	base := 10.0
	if a.Base != nil {
		base = *a.Base
	}
	switch {
	case x <= 0:
		return "", fmt.Errorf("x must be greater than 0, got %s", format(x))
	case base <= 0 || base == 1:
		return "", fmt.Errorf("base must be greater than 0 and not 1, got %s", format(base))
	}
	return finite(logBase(x, base))
}

// computeFactorial computes x! for a whole x from 0 to 170.
func computeFactorial(a Args) (string, error) {
	x, err := need(a.X, "x")
	if err != nil {
		return "", err
	}
	if x != math.Trunc(x) || x < 0 || x > 170 {
		return "", fmt.Errorf("x must be a whole number from 0 to 170, got %s", format(x))
	}
	return factorial(int64(x)), nil
}

// computeRound rounds x to the given decimals, 0 when none are given.
func computeRound(a Args) (string, error) {
	x, err := need(a.X, "x")
	if err != nil {
		return "", err
	}
	d := 0
	if a.Decimals != nil {
		d = *a.Decimals
	}
	if d < 0 || d > 15 {
		return "", fmt.Errorf("decimals must be from 0 to 15, got %d", d)
	}
	return format(roundHalfAway(x, d)), nil
}

// computePercentageChange gives the change from a to b in percent of |a|.
func computePercentageChange(a Args) (string, error) {
	old, err := need(a.A, "a (the old value)")
	if err != nil {
		return "", err
	}
	cur, err := need(a.B, "b (the new value)")
	if err != nil {
		return "", err
	}
	if old == 0 {
		return "", errors.New("a (the old value) must not be 0: a change from 0 has no percentage")
	}
	v, err := finite((cur - old) / math.Abs(old) * 100)
	if err != nil {
		return "", err
	}
	return v + "%", nil
}

// computeClamp limits x to the range from min_val to max_val.
func computeClamp(a Args) (string, error) {
	x, err := need(a.X, "x")
	if err != nil {
		return "", err
	}
	lo, err := need(a.MinVal, "min_val")
	if err != nil {
		return "", err
	}
	hi, err := need(a.MaxVal, "max_val")
	if err != nil {
		return "", err
	}
	if lo > hi {
		return "", fmt.Errorf("min_val (%s) must not be greater than max_val (%s)", format(lo), format(hi))
	}
	return format(math.Min(math.Max(x, lo), hi)), nil
}

// statistic computes the functions over values.
func statistic(a Args) (string, error) {
	vs := a.Values
	if len(vs) == 0 {
		return "", errors.New("values is required: pass a non-empty list of numbers")
	}
	switch a.Function {
	case "count":
		return strconv.Itoa(len(vs)), nil
	case "sum":
		return finite(sum(vs))
	case "average":
		return finite(sum(vs) / float64(len(vs)))
	case "min":
		return format(slices.Min(vs)), nil
	case "max":
		return format(slices.Max(vs)), nil
	case "range":
		return finite(slices.Max(vs) - slices.Min(vs))
	case "median":
		return finite(percentile(sorted(vs), 50))
	case "mode":
		return mode(vs), nil
	case "variance", "stdev":
		if len(vs) < 2 {
			return "", fmt.Errorf("needs at least 2 values (sample %s divides by n-1), got %d", a.Function, len(vs))
		}
		v := variance(vs)
		if a.Function == "stdev" {
			v = math.Sqrt(v)
		}
		return finite(v)
	case "percentile":
		p, err := need(a.P, "p")
		if err != nil {
			return "", err
		}
		if p < 0 || p > 100 {
			return "", fmt.Errorf("p must be from 0 to 100, got %s", format(p))
		}
		return finite(percentile(sorted(vs), p))
	}
	return "", fmt.Errorf("unknown statistic %q", a.Function)
}

// need returns the value of a required parameter.
func need(v *float64, name string) (float64, error) {
	if v == nil {
		return 0, fmt.Errorf("%s is required for this function", name)
	}
	return *v, nil
}

// finite formats v, or says that the result cannot be represented.
func finite(v float64) (string, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "", errors.New("the result is too large or not a number; use smaller values")
	}
	return format(v), nil
}

// sum adds values with Neumaier compensation, so long lists of decimals do
// not drift.
func sum(vs []float64) float64 {
	var s, c float64
	for _, v := range vs {
		t := s + v
		if math.Abs(s) >= math.Abs(v) {
			c += (s - t) + v
		} else {
			c += (v - t) + s
		}
		s = t
	}
	return s + c
}

// variance is the sample variance (divides by n-1), computed in two passes
// for accuracy.
func variance(vs []float64) float64 {
	mean := sum(vs) / float64(len(vs))
	dev := make([]float64, len(vs))
	for i, v := range vs {
		dev[i] = (v - mean) * (v - mean)
	}
	return sum(dev) / float64(len(vs)-1)
}

// sorted returns a sorted copy of vs.
func sorted(vs []float64) []float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s
}

// percentile interpolates linearly between the closest ranks of sorted s
// (the method of Excel's PERCENTILE.INC and NumPy's default).
func percentile(s []float64, p float64) float64 {
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	return s[lo] + (rank-float64(lo))*(s[hi]-s[lo])
}

// mode returns the most frequent values, all of them when tied, ascending.
func mode(vs []float64) string {
	counts := map[float64]int{}
	top := 0
	for _, v := range vs {
		counts[v]++
		top = max(top, counts[v])
	}
	var modes []float64
	for v, n := range counts {
		if n == top {
			modes = append(modes, v)
		}
	}
	slices.Sort(modes)
	return joinNumbers(modes)
}

// logBase is the logarithm of x to base, exact for bases 2, e and 10 where
// the dedicated functions are.
func logBase(x, base float64) float64 {
	switch base {
	case 10:
		return math.Log10(x)
	case 2:
		return math.Log2(x)
	case math.E:
		return math.Log(x)
	}
	return math.Log(x) / math.Log(base)
}

// factorial returns n! exactly while it has at most 21 digits, else in
// exponent form like other large results.
func factorial(n int64) string {
	f := new(big.Int).MulRange(1, n)
	if n == 0 {
		f.SetInt64(1)
	}
	if s := f.String(); len(s) <= 21 {
		return s
	}
	v, _ := new(big.Float).SetInt(f).Float64()
	return format(v)
}

// roundHalfAway rounds x to d decimals, halves away from zero, on the
// decimal number x prints as: round(1.005, 2) is 1.01, as a person expects,
// though the nearest binary value of 1.005 is slightly below it.
func roundHalfAway(x float64, d int) float64 {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
	if !ok {
		return x
	}
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d)), nil)
	r.Mul(r, new(big.Rat).SetInt(scale))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Abs(m).Lsh(m, 1).Cmp(r.Denom()) >= 0 {
		if r.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	v, _ := new(big.Rat).SetFrac(q, scale).Float64()
	return v
}

// format prints v compactly: at most 15 significant digits (hiding binary
// noise such as 0.30000000000000004), no trailing zeros, integers without a
// decimal point, exponent form only for very large or small magnitudes.
func format(v float64) string {
	if v == 0 {
		return "0" // also -0
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 15, 64), 64)
	if abs := math.Abs(r); abs >= 1e21 || abs < 1e-7 {
		return strconv.FormatFloat(r, 'g', -1, 64)
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

package calc_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/calc"
)

// call runs calculator through a registry; args is raw JSON when a string.
func call(t *testing.T, args any) tool.Result {
	t.Helper()
	reg, err := tool.NewRegistry(calc.New())
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return reg.Execute(context.Background(), tool.Env{}, llm.ToolCall{ID: "1", Name: "calculator", Arguments: raw})
}

type m = map[string]any

func TestEvaluate(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{"1+2", "3"},
		{"2+3*4^2", "50"},
		{"-2^2", "-4"},
		{"(-2)^2", "4"},
		{"2^3^2", "512"},
		{"2^-1", "0.5"},
		{"-3*-2", "6"},
		{"--2", "2"},
		{"+5", "5"},
		{"10-4-3", "3"},
		{"100/10/5", "2"},
		{"7 % 3", "1"},
		{"-7 % 3", "-1"},
		{"5.5 % 2", "1.5"},
		{"(1+2)*(3+4)", "21"},
		{"0.1+0.2", "0.3"},
		{"1/3", "0.333333333333333"},
		{".5*4", "2"},
		{"1e3+1.5E-1", "1000.15"},
		{"2e", "error"}, // 2 followed by the constant e needs an operator
		{"9223372036854775807 + 1", "9223372036854780000"}, // no int64 wrap-around,
		{"sqrt(16)", "4"},
		{"abs(-3.5)", "3.5"},
		{"ln(e)", "1"},
		{"log(1000)", "3"},
		{"log(8, 2)", "3"},
		{"log10(0.01)", "-2"},
		{"log2(1024)", "10"},
		{"exp(0)", "1"},
		{"pow(2, 10)", "1024"},
		{"floor(-2.5)", "-3"},
		{"ceil(2.1)", "3"},
		{"round(2.5)", "3"},
		{"round(-2.5)", "-3"},
		{"sin(pi/2)", "1"},
		{"cos(0)", "1"},
		{"tan(pi/4)", "1"},
		{"asin(1)*2", "3.14159265358979"},
		{"acos(1)", "0"},
		{"atan(1)*4", "3.14159265358979"},
		{"min(3, 1, 2)", "1"},
		{"max(3, 1, 2)", "3"},
		{"max(7)", "7"},
		{"PI", "3.14159265358979"},
		{"Sqrt(4)", "2"},
		{" 2 *\n 3 ", "6"},
		{"2*pi*10", "62.8318530717959"},
		{"1e20*10", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"1/1e8", "1e-08"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, m{"function": "evaluate", "expression": tt.expr})
			if tt.want == "error" {
				g.Expect(res.IsError).To(BeTrue(), res.Content)
				return
			}
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			g.Expect(res.Content).To(Equal(tt.want))
		})
	}
}

func TestEvaluateErrors(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{"1/0", "division by zero (at position 2)"},
		{"5 % 0", "modulo by zero"},
		{"0^-1", "division by zero"},
		{"sqrt(-1)", "sqrt(-1) is undefined or out of range"},
		{"ln(0)", "ln(0) is undefined"},
		{"asin(2)", "asin(2) is undefined"},
		{"(-8)^(1/3)", "is not a real number"},
		{"10^400", "too large to represent"},
		{"exp(1000)", "exp(1000) is undefined or out of range"},
		{"1e400", "invalid number"},
		{"", "expression is required"},
		{"   ", "expression is required"},
		{"2 +", "ends too early"},
		{"(1+2", "missing ')'"},
		{"1+2)", "unmatched ')'"},
		{"1, 2", "',' is only allowed between the arguments"},
		{"2 3", `unexpected "3"; an operator is missing`},
		{"2pi", `unexpected "pi"`},
		{"2**3", "use ^ for powers"},
		{"x + 1", `unknown name "x"`},
		{"foo(1)", `unknown function "foo"`},
		{"len('abc')", "unexpected character '\\''"},
		{`"a" + "b"`, "unexpected character"},
		{"[1, 2]", "unexpected character"},
		{"1..3", `unexpected ".3"`},
		{"1 == 1", "unexpected character"},
		{"true", `unknown name "true"`},
		{"pi > 3 ? 1 : 2", "unexpected character"},
		{"sqrt", "sqrt is a function; call it like sqrt(x)"},
		{"sqrt()", "sqrt takes 1 argument, got 0"},
		{"pow(2)", "pow takes 2 arguments, got 1"},
		{"log(1, 2, 3)", "log takes 1 or 2 arguments, got 3"},
		{"min()", "min takes at least 1 argument(s), got 0"},
		{"max(1 2)", `unexpected "2"; an operator is missing`},
		{"max(1; 2)", "unexpected character ';'"},
		{"2(3)", "write 2*(3)"},
		{"*3", `unexpected "*"`},
		{strings.Repeat("(", 150) + "1" + strings.Repeat(")", 150), "nested more than 100 levels"},
		{strings.Repeat("1+", 1500) + "1", "longer than 2000 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, m{"function": "evaluate", "expression": tt.expr})
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(HavePrefix("error: evaluate: "))
			g.Expect(res.Content).To(ContainSubstring(tt.want))
		})
	}
}

func TestFunctions(t *testing.T) {
	vals := []float64{2, 4, 4, 4, 5, 5, 7, 9}
	tests := []struct {
		name    string
		args    m
		want    string
		isError bool
	}{
		{"sum", m{"function": "sum", "values": vals}, "40", false},
		{"sum of decimals", m{"function": "sum", "values": []float64{0.1, 0.2, 0.3}}, "0.6", false},
		{"count", m{"function": "count", "values": vals}, "8", false},
		{"range", m{"function": "range", "values": vals}, "7", false},
		{"average", m{"function": "average", "values": vals}, "5", false},
		{"median even", m{"function": "median", "values": []float64{3, 1, 4, 2}}, "2.5", false},
		{"median odd", m{"function": "median", "values": []float64{3, 1, 2}}, "2", false},
		{"mode single", m{"function": "mode", "values": vals}, "4", false},
		{"mode tied, sorted", m{"function": "mode", "values": []float64{3, 1, 3, 1, 2}}, "1, 3", false},
		{"mode all unique", m{"function": "mode", "values": []float64{2, 1}}, "1, 2", false},
		{"variance (sample)", m{"function": "variance", "values": vals}, "4.57142857142857", false},
		{"stdev (sample)", m{"function": "stdev", "values": vals}, "2.1380899352994", false},
		{"stdev of two", m{"function": "stdev", "values": []float64{1, 3}}, "1.4142135623731", false},
		{"min", m{"function": "min", "values": vals}, "2", false},
		{"max", m{"function": "max", "values": vals}, "9", false},
		{"min negative", m{"function": "min", "values": []float64{-1.5, 3}}, "-1.5", false},
		{"log default base 10", m{"function": "log", "x": 1000}, "3", false},
		{"log base 2", m{"function": "log", "x": 8, "base": 2}, "3", false},
		{"log base 3", m{"function": "log", "x": 81, "base": 3}, "4", false},
		{"log fractional base", m{"function": "log", "x": 4, "base": 0.5}, "-2", false},
		{"factorial 0", m{"function": "factorial", "x": 0}, "1", false},
		{"factorial 5", m{"function": "factorial", "x": 5}, "120", false},
		{"factorial 21 exact", m{"function": "factorial", "x": 21}, "51090942171709440000", false},
		{"factorial 170", m{"function": "factorial", "x": 170}, "7.257415615308e+306", false},
		{"round default", m{"function": "round", "x": 2.5}, "3", false},
		{"round negative half", m{"function": "round", "x": -2.5}, "-3", false},
		{"round decimals", m{"function": "round", "x": 3.14159, "decimals": 2}, "3.14", false},
		{"round 1.005", m{"function": "round", "x": 1.005, "decimals": 2}, "1.01", false},
		{"round no trailing zeros", m{"function": "round", "x": 2, "decimals": 3}, "2", false},
		{"percentage increase", m{"function": "percentage_change", "a": 80, "b": 100}, "25%", false},
		{"percentage decrease", m{"function": "percentage_change", "a": 200, "b": 150}, "-25%", false},
		{"percentage from negative", m{"function": "percentage_change", "a": -50, "b": -25}, "50%", false},
		{"percentile 50", m{"function": "percentile", "values": []float64{1, 2, 3, 4}, "p": 50}, "2.5", false},
		{"percentile 90", m{"function": "percentile", "values": []float64{15, 20, 35, 40, 50}, "p": 90}, "46", false},
		{"percentile 0", m{"function": "percentile", "values": []float64{5, 1, 3}, "p": 0}, "1", false},
		{"percentile 100", m{"function": "percentile", "values": []float64{5, 1, 3}, "p": 100}, "5", false},
		{"percentile one value", m{"function": "percentile", "values": []float64{7}, "p": 30}, "7", false},
		{"clamp below", m{"function": "clamp", "x": -5, "min_val": 0, "max_val": 10}, "0", false},
		{"clamp above", m{"function": "clamp", "x": 15, "min_val": 0, "max_val": 10}, "10", false},
		{"clamp inside", m{"function": "clamp", "x": 2.5, "min_val": 0, "max_val": 10}, "2.5", false},
		{"clamp equal bounds", m{"function": "clamp", "x": 3, "min_val": 1, "max_val": 1}, "1", false},

		// Errors with specific messages.
		{"empty values", m{"function": "sum", "values": []float64{}}, "values is required", true},
		{"missing values", m{"function": "median"}, "median: values is required", true},
		{"null values", m{"function": "average", "values": nil}, "values is required", true},
		{"variance of one", m{"function": "variance", "values": []float64{1}}, "needs at least 2 values", true},
		{"stdev of one", m{"function": "stdev", "values": []float64{1}}, "needs at least 2 values", true},
		{"sum overflow", m{"function": "sum", "values": []float64{1.7e308, 1.7e308}}, "too large", true},
		{"log missing x", m{"function": "log"}, "x is required", true},
		{"log of zero", m{"function": "log", "x": 0}, "x must be greater than 0", true},
		{"log negative", m{"function": "log", "x": -1}, "x must be greater than 0", true},
		{"log base 1", m{"function": "log", "x": 5, "base": 1}, "base must be greater than 0 and not 1", true},
		{"log base 0", m{"function": "log", "x": 5, "base": 0}, "base must be greater than 0", true},
		{"factorial missing x", m{"function": "factorial"}, "x is required", true},
		{"factorial fraction", m{"function": "factorial", "x": 2.5}, "whole number from 0 to 170", true},
		{"factorial negative", m{"function": "factorial", "x": -1}, "whole number from 0 to 170", true},
		{"factorial too large", m{"function": "factorial", "x": 171}, "whole number from 0 to 170", true},
		{"round missing x", m{"function": "round", "decimals": 2}, "x is required", true},
		{"round decimals too large", m{"function": "round", "x": 1, "decimals": 16}, "invalid arguments", true},
		{"round decimals negative", m{"function": "round", "x": 1, "decimals": -1}, "invalid arguments", true},
		{"percentage_change missing b", m{"function": "percentage_change", "a": 1}, "b (the new value) is required", true},
		{"percentage_change missing a", m{"function": "percentage_change", "b": 1}, "a (the old value) is required", true},
		{"percentage_change from zero", m{"function": "percentage_change", "a": 0, "b": 5}, "must not be 0", true},
		{"percentile missing p", m{"function": "percentile", "values": []float64{1}}, "p is required", true},
		{"percentile p too large", m{"function": "percentile", "values": []float64{1}, "p": 101}, "invalid arguments", true},
		{"percentile missing values", m{"function": "percentile", "p": 50}, "values is required", true},
		{"clamp missing bound", m{"function": "clamp", "x": 1, "min_val": 0}, "max_val is required", true},
		{"clamp inverted bounds", m{"function": "clamp", "x": 1, "min_val": 5, "max_val": 0}, "min_val (5) must not be greater than max_val (0)", true},
		{"evaluate missing expression", m{"function": "evaluate"}, "expression is required", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, tt.args)
			g.Expect(res.IsError).To(Equal(tt.isError), res.Content)
			if tt.isError {
				g.Expect(res.Content).To(ContainSubstring(tt.want))
			} else {
				g.Expect(res.Content).To(Equal(tt.want))
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	for name, args := range map[string]string{
		"malformed JSON":        `{"function": "sum"`,
		"missing function":      `{"values": [1, 2]}`,
		"unknown function":      `{"function": "integrate", "expression": "x"}`,
		"function wrong type":   `{"function": 1}`,
		"values wrong type":     `{"function": "sum", "values": "1,2,3"}`,
		"values element string": `{"function": "sum", "values": [1, "2"]}`,
		"x wrong type":          `{"function": "log", "x": "10"}`,
		"decimals not integer":  `{"function": "round", "x": 1.5, "decimals": 1.5}`,
		"unknown property":      `{"function": "sum", "values": [1], "precision": 2}`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			res := call(t, args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring("invalid arguments"))
		})
	}
}

func TestSchema(t *testing.T) {
	g := NewWithT(t)
	tl := calc.New()
	g.Expect(tl.Name()).To(Equal("calculator"))
	g.Expect(tl.Traits().ReadOnly).To(BeTrue())
	var s struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	g.Expect(json.Unmarshal(tl.Schema(), &s)).To(Succeed())
	g.Expect(s.Required).To(Equal([]string{"function"}))
	g.Expect(s.Properties["function"].Enum).To(ConsistOf(
		"evaluate", "sum", "count", "range", "average", "median", "mode", "stdev", "variance",
		"min", "max", "log", "factorial", "round", "percentage_change", "percentile", "clamp"))
}

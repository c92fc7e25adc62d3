package calc

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The evaluator is a small Pratt parser rather than github.com/expr-lang/expr.
// expr cannot be restricted to arithmetic: an environment holding only the
// allowed functions still leaves its literal syntax (strings, arrays, maps,
// ranges like 1..3, ternaries, comparisons, let bindings, pipes) open, it
// computes integer literals in int64 that overflow silently
// (9223372036854775807 + 1 is negative), and its % accepts only integers.
// Covering those gaps would take an AST filter plus operator overrides, more
// code than this parser, which accepts exactly the documented grammar, works
// in float64 throughout and reports errors by position.

const (
	// maxExprLen bounds the expression text.
	maxExprLen = 2000
	// maxDepth bounds nesting, so "((((...))))" cannot exhaust the stack.
	maxDepth = 100
)

// Binding powers, weakest first. Unary minus binds looser than ^, so -2^2 is
// -(2^2) = -4 as in mathematics.
const (
	bpSum     = 10 // + -
	bpProduct = 20 // * / %
	bpUnary   = 30 // prefix - +
	bpPower   = 40 // ^ (right-associative)
)

// constants are the names an expression may use as values.
var constants = map[string]float64{"pi": math.Pi, "e": math.E}

// function is a callable in expressions.
type function struct {
	minArgs, maxArgs int // maxArgs < 0: no upper bound
	fn               func(args []float64) float64
}

func unary(f func(float64) float64) function {
	return function{minArgs: 1, maxArgs: 1, fn: func(a []float64) float64 { return f(a[0]) }}
}

// functions are the callables in expressions; nothing else is reachable.
var functions = map[string]function{
	"sqrt":  unary(math.Sqrt),
	"abs":   unary(math.Abs),
	"ln":    unary(math.Log),
	"log10": unary(math.Log10),
	"log2":  unary(math.Log2),
	"exp":   unary(math.Exp),
	"floor": unary(math.Floor),
	"ceil":  unary(math.Ceil),
	"round": unary(math.Round),
	"sin":   unary(math.Sin),
	"cos":   unary(math.Cos),
	"tan":   unary(math.Tan),
	"asin":  unary(math.Asin),
	"acos":  unary(math.Acos),
	"atan":  unary(math.Atan),
	// log(x) is base 10; log(x, b) is base b.
	"log": {minArgs: 1, maxArgs: 2, fn: func(a []float64) float64 {
		if len(a) == 2 {
			return logBase(a[0], a[1])
		}
		return math.Log10(a[0])
	}},
	"pow": {minArgs: 2, maxArgs: 2, fn: func(a []float64) float64 { return math.Pow(a[0], a[1]) }},
	"min": {minArgs: 1, maxArgs: -1, fn: func(a []float64) float64 {
		m := a[0]
		for _, v := range a[1:] {
			m = math.Min(m, v)
		}
		return m
	}},
	"max": {minArgs: 1, maxArgs: -1, fn: func(a []float64) float64 {
		m := a[0]
		for _, v := range a[1:] {
			m = math.Max(m, v)
		}
		return m
	}},
}

// exprError is a problem in an expression, with the 0-based byte offset it
// was found at.
type exprError struct {
	pos int
	msg string
}

func (e *exprError) Error() string {
	return fmt.Sprintf("%s (at position %d)", e.msg, e.pos+1)
}

// tokenKind classifies tokens.
type tokenKind int

const (
	tokEOF tokenKind = iota
	tokNum
	tokIdent
	tokOp // + - * / % ^ ( ) ,
)

type token struct {
	kind tokenKind
	text string
	num  float64
	pos  int
}

// lex splits src into tokens.
func lex(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case isDigit(c) || c == '.':
			j := i
			for j < len(src) && isDigit(src[j]) {
				j++
			}
			if j < len(src) && src[j] == '.' {
				j++
				for j < len(src) && isDigit(src[j]) {
					j++
				}
			}
			// An exponent only when digits follow: "2e" is 2 then e.
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && isDigit(src[k]) {
					for k < len(src) && isDigit(src[k]) {
						k++
					}
					j = k
				}
			}
			v, err := strconv.ParseFloat(src[i:j], 64)
			if err != nil || math.IsInf(v, 0) {
				return nil, &exprError{pos: i, msg: fmt.Sprintf("invalid number %q", src[i:j])}
			}
			toks = append(toks, token{kind: tokNum, text: src[i:j], num: v, pos: i})
			i = j
		case isLetter(c):
			j := i
			for j < len(src) && (isLetter(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, token{kind: tokIdent, text: src[i:j], pos: i})
			i = j
		case strings.IndexByte("+-*/%^(),", c) >= 0:
			if c == '*' && i+1 < len(src) && src[i+1] == '*' {
				return nil, &exprError{pos: i, msg: "'**' is not an operator; use ^ for powers"}
			}
			toks = append(toks, token{kind: tokOp, text: string(c), pos: i})
			i++
		default:
			r := []rune(src[i:])[0]
			return nil, &exprError{pos: i, msg: fmt.Sprintf("unexpected character %q; expressions may only use numbers, + - * / %% ^, parentheses, the functions %s and the constants pi and e", r, functionList())}
		}
	}
	return append(toks, token{kind: tokEOF, pos: len(src)}), nil
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

// functionList names the functions for error messages.
func functionList() string {
	return "sqrt, abs, ln, log, log10, log2, exp, pow, floor, ceil, round, sin, cos, tan, asin, acos, atan, min, max"
}

// evaluator computes an expression while parsing it.
type evaluator struct {
	toks  []token
	i     int
	depth int
}

// evaluate computes src. Every intermediate result must be a finite number.
func evaluate(src string) (float64, error) {
	if strings.TrimSpace(src) == "" {
		return 0, &exprError{msg: "the expression is empty"}
	}
	if len(src) > maxExprLen {
		return 0, &exprError{msg: fmt.Sprintf("the expression is longer than %d characters", maxExprLen)}
	}
	toks, err := lex(src)
	if err != nil {
		return 0, err
	}
	ev := &evaluator{toks: toks}
	v, err := ev.expr(0)
	if err != nil {
		return 0, err
	}
	switch t := ev.peek(); {
	case t.kind == tokEOF:
	case t.text == ")":
		return 0, &exprError{pos: t.pos, msg: "unmatched ')'"}
	case t.text == ",":
		return 0, &exprError{pos: t.pos, msg: "',' is only allowed between the arguments of a function"}
	default:
		return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("unexpected %q", t.text)}
	}
	return v, nil
}

func (ev *evaluator) peek() token { return ev.toks[ev.i] }

func (ev *evaluator) next() token {
	t := ev.toks[ev.i]
	if t.kind != tokEOF {
		ev.i++
	}
	return t
}

// expr parses an expression whose operators bind tighter than minBP.
func (ev *evaluator) expr(minBP int) (float64, error) {
	if ev.depth++; ev.depth > maxDepth {
		return 0, &exprError{pos: ev.peek().pos, msg: fmt.Sprintf("the expression is nested more than %d levels deep", maxDepth)}
	}
	defer func() { ev.depth-- }()

	left, err := ev.prefix()
	if err != nil {
		return 0, err
	}
	for {
		t := ev.peek()
		switch {
		case t.kind == tokEOF:
			return left, nil
		case t.kind == tokIdent:
			return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("unexpected %q; an operator is missing before it (write 2*pi, not 2pi)", t.text)}
		case t.kind == tokNum:
			return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("unexpected %q; an operator is missing before it", t.text)}
		case t.text == "(":
			return 0, &exprError{pos: t.pos, msg: "an operator is missing before '(' (write 2*(3), not 2(3))"}
		}
		bp, rightBP := infixBP(t.text)
		if bp == 0 || bp <= minBP {
			return left, nil
		}
		ev.next()
		right, err := ev.expr(rightBP)
		if err != nil {
			return 0, err
		}
		if left, err = binary(t, left, right); err != nil {
			return 0, err
		}
	}
}

// infixBP returns the binding power of an infix operator and the power its
// right operand is parsed with (one less for right-associative ^); 0 means
// op is not infix.
func infixBP(op string) (bp, right int) {
	switch op {
	case "+", "-":
		return bpSum, bpSum
	case "*", "/", "%":
		return bpProduct, bpProduct
	case "^":
		return bpPower, bpPower - 1
	}
	return 0, 0
}

// prefix parses a number, constant, call, parenthesised expression or
// unary sign.
func (ev *evaluator) prefix() (float64, error) {
	t := ev.next()
	switch t.kind {
	case tokNum:
		return t.num, nil
	case tokIdent:
		return ev.identifier(t)
	case tokOp:
		switch t.text {
		case "-", "+":
			v, err := ev.expr(bpUnary)
			if t.text == "-" {
				v = -v
			}
			return v, err
		case "(":
			v, err := ev.expr(0)
			if err != nil {
				return 0, err
			}
			if c := ev.next(); c.text != ")" || c.kind != tokOp {
				return 0, &exprError{pos: c.pos, msg: "missing ')'"}
			}
			return v, nil
		}
		return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("unexpected %q; a number, constant, function or '(' was expected", t.text)}
	}
	return 0, &exprError{pos: t.pos, msg: "the expression ends too early; an operand is missing"}
}

// identifier evaluates a constant or a function call.
func (ev *evaluator) identifier(t token) (float64, error) {
	name := strings.ToLower(t.text)
	if ev.peek().text != "(" {
		if v, ok := constants[name]; ok {
			return v, nil
		}
		if _, ok := functions[name]; ok {
			return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("%s is a function; call it like %s(x)", name, name)}
		}
		return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("unknown name %q; only the constants pi and e are defined (variables are not supported)", t.text)}
	}
	f, ok := functions[name]
	if !ok {
		return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("unknown function %q; available: %s", t.text, functionList())}
	}
	ev.next() // (
	var args []float64
	if ev.peek().text == ")" {
		ev.next()
	} else {
		for {
			v, err := ev.expr(0)
			if err != nil {
				return 0, err
			}
			args = append(args, v)
			c := ev.next()
			if c.kind == tokOp && c.text == ")" {
				break
			}
			if c.kind != tokOp || c.text != "," {
				return 0, &exprError{pos: c.pos, msg: fmt.Sprintf("expected ',' or ')' in the arguments of %s", name)}
			}
		}
	}
	if len(args) < f.minArgs || f.maxArgs >= 0 && len(args) > f.maxArgs {
		return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("%s takes %s, got %d", name, arity(f), len(args))}
	}
	v := f.fn(args)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, &exprError{pos: t.pos, msg: fmt.Sprintf("%s(%s) is undefined or out of range", name, joinNumbers(args))}
	}
	return v, nil
}

// arity describes how many arguments f takes.
func arity(f function) string {
	switch {
	case f.maxArgs < 0:
		return fmt.Sprintf("at least %d argument(s)", f.minArgs)
	case f.minArgs == f.maxArgs && f.minArgs == 1:
		return "1 argument"
	case f.minArgs == f.maxArgs:
		return fmt.Sprintf("%d arguments", f.minArgs)
	}
	return fmt.Sprintf("%d or %d arguments", f.minArgs, f.maxArgs)
}

// binary applies an infix operator.
func binary(op token, a, b float64) (float64, error) {
	var v float64
	switch op.text {
	case "+":
		v = a + b
	case "-":
		v = a - b
	case "*":
		v = a * b
	case "/":
		if b == 0 {
			return 0, &exprError{pos: op.pos, msg: "division by zero"}
		}
		v = a / b
	case "%":
		if b == 0 {
			return 0, &exprError{pos: op.pos, msg: "modulo by zero"}
		}
		v = math.Mod(a, b)
	case "^":
		if a == 0 && b < 0 {
			return 0, &exprError{pos: op.pos, msg: "division by zero (0 raised to a negative power)"}
		}
		v = math.Pow(a, b)
		if math.IsNaN(v) {
			return 0, &exprError{pos: op.pos, msg: fmt.Sprintf("%s^%s is not a real number", format(a), format(b))}
		}
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, &exprError{pos: op.pos, msg: fmt.Sprintf("%s %s %s is too large to represent", format(a), op.text, format(b))}
	}
	return v, nil
}

// joinNumbers formats args for messages.
func joinNumbers(args []float64) string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = format(a)
	}
	return strings.Join(s, ", ")
}

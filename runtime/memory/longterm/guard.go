package longterm

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// Sensitive is a category of personal matters memory keeps only when the
// agent allows it (spec.memory.allowSensitive).
type Sensitive string

// Sensitive categories, as in api/v1alpha1.SensitiveCategory.
const (
	Health  Sensitive = "health"
	Finance Sensitive = "finance"
	Legal   Sensitive = "legal"
	Family  Sensitive = "family"
)

// Refusal is the error of a write the guard refuses. Its message says what
// was found (never the value itself) and what to do instead, for the model.
type Refusal struct {
	// What names what was found, e.g. "a bank card number".
	What string
	// Category is set for a sensitive-matters refusal.
	Category Sensitive
	// Matched is the word that placed it in Category.
	Matched string
}

func (r *Refusal) Error() string {
	if r.Category != "" {
		return fmt.Sprintf("refused: the entry is about %s matters (%q), which this agent's memory does not keep "+
			"(spec.memory.allowSensitive does not list %q). Leave it out of memory; if the user wants it kept, "+
			"an operator can add %q to spec.memory.allowSensitive", r.Category, r.Matched, r.Category, r.Category)
	}
	return fmt.Sprintf("refused: the entry contains %s. Identity numbers, social-security numbers, bank card numbers, "+
		"passwords, API keys and session tokens are never written to memory, whatever the settings. "+
		"Keep credentials in a Secret the agent references by name (they then never enter the conversation); "+
		"remember at most that one exists, e.g. \"the user's card ends in 1234\"", r.What)
}

// Guard decides what memory may keep.
type Guard struct {
	allowed []Sensitive
}

// NewGuard returns a guard allowing the given sensitive categories. Hard
// identifiers and credentials are refused whatever is allowed.
func NewGuard(allow ...Sensitive) Guard {
	return Guard{allowed: allow}
}

// Check returns a *Refusal when text may not be stored, nil otherwise.
func (g Guard) Check(text string) *Refusal {
	if sp := findSecrets(text); len(sp) > 0 {
		return &Refusal{What: sp[0].what}
	}
	lower := strings.ToLower(text)
	for _, t := range compiledPatterns().topics {
		if slices.Contains(g.allowed, t.category) {
			continue
		}
		if m := t.re.FindString(lower); m != "" {
			return &Refusal{Category: t.category, Matched: m}
		}
	}
	return nil
}

// Redact replaces identifiers and credentials in text with [redacted], for
// text memory must keep anyway (conversation summaries).
func (g Guard) Redact(text string) string {
	sp := findSecrets(text)
	if len(sp) == 0 {
		return text
	}
	slices.SortFunc(sp, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	last := 0
	for _, s := range sp {
		if s.start < last {
			s.start = last
		}
		if s.end <= s.start {
			continue
		}
		b.WriteString(text[last:s.start])
		b.WriteString("[redacted]")
		last = s.end
	}
	b.WriteString(text[last:])
	return b.String()
}

type span struct {
	start, end int
	what       string
}

// findSecrets returns the spans of identity numbers, social-security and
// bank card numbers, passwords, keys and tokens in text.
func findSecrets(text string) []span {
	var out []span
	taken := func(start, end int) bool {
		for _, s := range out {
			if start < s.end && end > s.start {
				return true
			}
		}
		return false
	}
	p := compiledPatterns()
	// Chinese resident identity numbers first: 18 digits would also pass
	// for a card number.
	for _, loc := range p.chineseID.FindAllStringIndex(text, -1) {
		if isolated(text, loc[0], loc[1]) && validChineseID(text[loc[0]:loc[1]]) {
			out = append(out, span{loc[0], loc[1], "an identity number (Chinese resident ID, checksum valid)"})
		}
	}
	for _, loc := range p.ssn.FindAllStringIndex(text, -1) {
		if isolated(text, loc[0], loc[1]) && validSSN(text[loc[0]:loc[1]]) && !taken(loc[0], loc[1]) {
			out = append(out, span{loc[0], loc[1], "a social-security number"})
		}
	}
	for _, loc := range p.ssnContext.FindAllStringSubmatchIndex(text, -1) {
		if !taken(loc[2], loc[3]) {
			out = append(out, span{loc[2], loc[3], "a social-security number"})
		}
	}
	for _, loc := range p.digitRun.FindAllStringIndex(text, -1) {
		if !isolated(text, loc[0], loc[1]) {
			continue
		}
		if start, end, ok := findCard(text[loc[0]:loc[1]]); ok && !taken(loc[0]+start, loc[0]+end) {
			out = append(out, span{loc[0] + start, loc[0] + end, "a bank card number (passes the Luhn check)"})
		}
	}
	for _, c := range p.credentials {
		for _, loc := range c.re.FindAllStringIndex(text, -1) {
			if !taken(loc[0], loc[1]) {
				out = append(out, span{loc[0], loc[1], c.what})
			}
		}
	}
	return out
}

// guardPatterns are the guard's compiled expressions.
type guardPatterns struct {
	chineseID, ssn, ssnContext, digitRun *regexp.Regexp
	credentials                          []credentialPattern
	topics                               []topicPattern
}

type credentialPattern struct {
	what string
	re   *regexp.Regexp
}

type topicPattern struct {
	category Sensitive
	re       *regexp.Regexp
}

// compiledPatterns compiles the guard's expressions on first use rather than
// at package initialisation: they take about 0.3 MB of heap, and every
// process of the picobot binary (session pods that never store a memory,
// the gateway, the CLI) would otherwise hold them for its whole life.
var compiledPatterns = sync.OnceValue(func() *guardPatterns {
	return &guardPatterns{
		chineseID: regexp.MustCompile(`[1-9]\d{16}[\dXx]`),
		ssn:       regexp.MustCompile(`\d{3}-\d{2}-\d{4}`),
		// A number right after a social-security label, in English or
		// Chinese (a Chinese social-security number is the resident ID
		// number).
		ssnContext: regexp.MustCompile(`(?i)(?:\bssn|social[ -]security(?: number| no\.?| #)?|社保号|社保卡号|社会保障号|社会保障卡号)\s*(?:is|=|:|：|是|为)?\s*([0-9][0-9 -]{7,}[0-9Xx])`),
		// digitRun finds groups of digits separated by single spaces or
		// dashes, the ways card numbers are written.
		digitRun:    regexp.MustCompile(`\d+(?:[ -]\d+)*`),
		credentials: credentialPatterns(),
		topics:      topicPatterns(),
	}
})

// findCard looks for a card number in a run of digit groups: whole groups,
// 13 to 19 digits together, passing the Luhn check and not one repeated
// digit. It returns the byte range of the first one.
func findCard(run string) (start, end int, ok bool) {
	type group struct{ start, end int }
	var groups []group
	from := 0
	for i := 0; i <= len(run); i++ {
		if i == len(run) || run[i] == ' ' || run[i] == '-' {
			groups = append(groups, group{from, i})
			from = i + 1
		}
	}
	for i := range groups {
		for j := i; j < len(groups); j++ {
			digits := onlyDigits(run[groups[i].start:groups[j].end])
			if len(digits) > 19 {
				break
			}
			if len(digits) >= 13 && luhn(digits) && strings.Trim(digits, digits[:1]) != "" {
				return groups[i].start, groups[j].end, true
			}
		}
	}
	return 0, 0, false
}

func credentialPatterns() []credentialPattern {
	return []credentialPattern{
		{"a private key", regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)},
		{"an API key", regexp.MustCompile(`\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}|AIza[0-9A-Za-z_\-]{35})`)},
		{"a session token (JWT)", regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`)},
		{"a bearer token", regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*`)},
		{"a password", regexp.MustCompile(`(?i)\b(?:password|passwd|passphrase|passcode|pwd|pin)\b\s*(?:is|was|=|:|：)\s*\S+`)},
		{"a password", regexp.MustCompile(`(?:密码|口令|支付密码|登录密码)\s*(?:是|为|：|:|=)\s*\S+`)},
		{"a key or token", regexp.MustCompile(`(?i)\b(?:api[_ \-]?key|secret(?:[_ \-]?key)?|access[_ \-]?(?:key|token)|auth[_ \-]?token|refresh[_ \-]?token|session[_ \-]?(?:id|token|cookie|key)|token|cookie)\b\s*(?:is|=|:|：)\s*['"]?[A-Za-z0-9._~+/=\-]{12,}`)},
		{"a key or token", regexp.MustCompile(`(?:密钥|秘钥|令牌|会话(?:令牌|标识)|访问令牌|token)\s*(?:是|为|：|:|=)\s*['"]?[A-Za-z0-9._~+/=\-]{8,}`)},
	}
}

// isolated reports whether text[start:end] is not part of a longer run of
// digits or letters (so a substring of a longer number is not judged alone).
func isolated(text string, start, end int) bool {
	if start > 0 {
		if r := lastRune(text[:start]); unicode.IsDigit(r) || (r < 128 && unicode.IsLetter(r)) {
			return false
		}
	}
	if end < len(text) {
		if r := []rune(text[end:min(end+4, len(text))]); len(r) > 0 && (unicode.IsDigit(r[0]) || (r[0] < 128 && unicode.IsLetter(r[0]))) {
			return false
		}
	}
	return true
}

func lastRune(s string) rune {
	r := []rune(s[max(0, len(s)-4):])
	if len(r) == 0 {
		return 0
	}
	return r[len(r)-1]
}

// validChineseID checks the GB 11643 checksum of an 18-character ID and that
// its birth date is a plausible date.
func validChineseID(id string) bool {
	weights := [17]int{7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2}
	const checks = "10X98765432"
	sum := 0
	for i := range 17 {
		sum += int(id[i]-'0') * weights[i]
	}
	if unicode.ToUpper(rune(id[17])) != rune(checks[sum%11]) {
		return false
	}
	year := atoi(id[6:10])
	month, day := atoi(id[10:12]), atoi(id[12:14])
	return year >= 1900 && year <= 2100 && month >= 1 && month <= 12 && day >= 1 && day <= 31
}

// validSSN rejects numbers the US never issues (area 000, 666, 900-999;
// group 00; serial 0000).
func validSSN(s string) bool {
	area, group, serial := atoi(s[0:3]), atoi(s[4:6]), atoi(s[7:11])
	return area != 0 && area != 666 && area < 900 && group != 0 && serial != 0
}

// luhn checks the Luhn (mod 10) checksum of a digit string.
func luhn(digits string) bool {
	sum := 0
	double := false
	for i := len(digits) - 1; i >= 0; i-- {
		d := int(digits[i] - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

func onlyDigits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// topicPatterns are the words that place an entry among sensitive matters.
// English words match whole; Chinese ones anywhere.
func topicPatterns() []topicPattern {
	return []topicPattern{
		{Health, topicRE(
			[]string{"diagnosis", "diagnosed", "disease", "illness", "medication", "medications", "prescription", "prescribed",
				"therapy", "therapist", "psychiatrist", "depression", "anxiety disorder", "cancer", "diabetes", "hiv", "pregnant",
				"pregnancy", "surgery", "chemotherapy", "mental health", "medical condition", "allergic to"},
			[]string{"诊断", "确诊", "疾病", "病情", "病史", "药物", "处方", "抑郁", "焦虑症", "癌症", "糖尿病", "艾滋", "怀孕", "手术",
				"化疗", "住院", "心理治疗", "精神病"})},
		{Finance, topicRE(
			[]string{"salary", "income", "debt", "debts", "loan", "loans", "mortgage", "bank balance", "account balance",
				"credit score", "net worth", "bankruptcy", "tax return", "savings account"},
			[]string{"工资", "薪水", "薪资", "收入", "负债", "欠款", "贷款", "房贷", "存款", "余额", "信用分", "征信", "破产", "税单"})},
		{Legal, topicRE(
			[]string{"lawsuit", "sued", "arrested", "arrest", "criminal record", "convicted", "conviction", "court case",
				"probation", "indicted", "legal dispute", "immigration status"},
			[]string{"诉讼", "起诉", "被告", "逮捕", "拘留", "犯罪记录", "案底", "官司", "判决", "判刑", "缓刑", "仲裁"})},
		{Family, topicRE(
			[]string{"divorce", "divorced", "affair", "custody", "domestic violence", "separated from", "estranged",
				"family conflict", "marital"},
			[]string{"离婚", "出轨", "婚外情", "抚养权", "家暴", "分居", "家庭矛盾", "婆媳"})},
	}
}

func topicRE(english, chinese []string) *regexp.Regexp {
	quoted := make([]string, 0, len(english)+len(chinese))
	for _, w := range english {
		quoted = append(quoted, `\b`+regexp.QuoteMeta(w)+`\b`)
	}
	for _, w := range chinese {
		quoted = append(quoted, regexp.QuoteMeta(w))
	}
	return regexp.MustCompile(strings.Join(quoted, "|"))
}

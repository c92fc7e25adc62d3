package memory

import (
	"regexp"
	"strings"
)

// relativeDates are words whose meaning depends on when they are read.
var relativeDates = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(?:today|tonight|yesterday|tomorrow|recently|the other day|the day (?:before|after) (?:yesterday|tomorrow)|` +
		`this (?:morning|afternoon|evening|week|weekend|month|year)|last (?:night|week|weekend|month|year)|` +
		`next (?:week|weekend|month|year)|(?:a|an|one|two|three|few|couple of|several|\d+) (?:days?|weeks?|months?|years?) ago)\b`),
	regexp.MustCompile(`今天|今日|今晚|今早|昨天|昨日|昨晚|明天|明日|明早|明晚|前天|后天|本周|这周|上周|下周|本月|这个月|上个月|下个月|` +
		`今年|去年|明年|前年|后年|刚才|刚刚|最近|前几天|[0-9一二三四五六七八九十几]+(?:天|周|个月|年)(?:前|以前|之前)`),
}

// RelativeDate returns the first relative date expression in text ("today",
// "上周"), or "" when it has none.
func RelativeDate(text string) string {
	for _, re := range relativeDates {
		if m := re.FindString(text); m != "" {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

package e2e

import "strings"

func firstLineWith(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func indexByte(s string, c byte) int { return strings.IndexByte(s, c) }

func trim(s string) string { return strings.TrimSpace(s) }

func trimQuotes(s string) string { return strings.Trim(s, `"`) }

package aevolve

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Helpers over decoded JSON objects.

// str is m[k] as a string (numbers formatted), or "".
func str(m map[string]any, k string) string {
	switch v := m[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// number is m[k] as a float (bools and numeric strings accepted).
// maxCount bounds a cycle, batch or attempt number read from a result file:
// a larger (or fractional, negative, NaN) one is refused, not wrapped into
// an int32.
const maxCount = 1 << 20

// count reads m[k] as a round or attempt number: ok says it is there, and
// bad, when not "", why it cannot be one (the row is then skipped).
func count(m map[string]any, k string) (n int32, ok bool, bad string) {
	f, ok := number(m, k)
	if !ok {
		return 0, false, ""
	}
	if f != math.Trunc(f) || f < 0 || f > maxCount {
		return 0, true, k + " out of range"
	}
	return int32(f), true, ""
}

func number(m map[string]any, k string) (float64, bool) {
	switch v := m[k].(type) {
	case float64:
		return v, true
	case bool:
		return b2f(v), true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	}
	return 0, false
}

// boolean is m[k] as a bool (numbers and words such as "pass" accepted).
func boolean(m map[string]any, k string) (bool, bool) {
	switch v := m[k].(type) {
	case bool:
		return v, true
	case float64:
		return v != 0, true
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "1", "yes", "pass", "passed":
			return true, true
		case "false", "0", "no", "fail", "failed":
			return false, true
		}
	}
	return false, false
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// truncate cuts s to at most n bytes, on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// parseTime parses A-Evolve's zone-less local timestamps (read as UTC) and
// RFC 3339.
func parseTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

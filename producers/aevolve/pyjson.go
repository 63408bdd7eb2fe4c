package aevolve

import (
	"encoding/json"
	"strings"
)

// normalizeJSON turns a Python-repr-flavoured line (True, False, None, NaN,
// Infinity, single-quoted strings) into JSON. Text inside strings is kept.
func normalizeJSON(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteString(s[i : j+1])
			i = j + 1
		case c == '\'':
			// A Python single-quoted string: re-quote it for JSON.
			b.WriteByte('"')
			j := i + 1
			for j < len(s) && s[j] != '\'' {
				switch {
				case s[j] == '\\' && j+1 < len(s):
					if s[j+1] == '\'' {
						b.WriteByte('\'')
					} else {
						b.WriteByte('\\')
						b.WriteByte(s[j+1])
					}
					j += 2
					continue
				case s[j] == '"':
					b.WriteString(`\"`)
				default:
					b.WriteByte(s[j])
				}
				j++
			}
			b.WriteByte('"')
			i = j + 1
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			switch w := s[i:j]; w {
			case "True":
				b.WriteString("true")
			case "False":
				b.WriteString("false")
			case "None", "NaN", "nan":
				b.WriteString("null")
			case "Infinity", "inf":
				b.WriteString("null")
			default:
				b.WriteString(w)
			}
			i = j
		case c == '-' && strings.HasPrefix(s[i:], "-Infinity"):
			b.WriteString("null")
			i += len("-Infinity")
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdent(c byte) bool      { return isIdentStart(c) || c >= '0' && c <= '9' }

// parseLoose unmarshals a JSON or Python-repr document into v.
func parseLoose(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err == nil {
		return nil
	}
	return json.Unmarshal([]byte(normalizeJSON(string(data))), v)
}

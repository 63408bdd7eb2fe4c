package chdb

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Bind replaces the positional placeholders of query, each ? outside quoted
// strings ('...'), quoted identifiers ("..." and `...`), heredocs ($$...$$,
// $tag$...$tag$) and comments (-- and "# " or "#!" to the end of the line,
// /* ... */ nested), with SQL literals of args, in order:
//
//   - a string (or a type whose kind is string): single-quoted, with \ and '
//     (and NUL, as \0) escaped by a backslash; []byte likewise
//   - every Go int and uint kind: decimal
//   - float64 and float32: strconv 'g' with the shortest precision, NaN as
//     nan, ±Inf as inf and -inf
//   - bool: 1 or 0
//   - nil, or a nil pointer: NULL; another pointer: what it points to
//   - []string, or a slice of any of these: an array literal, ['a','b']
//
// A negative number right after a minus sign gets a space before it, so
// that "x-?" never turns into a comment. More or fewer args than
// placeholders, or an arg of another type, is an error. It keeps no state:
// safe for concurrent use.
func Bind(query string, args ...any) (string, error) {
	var b strings.Builder
	b.Grow(len(query) + 16*len(args))
	n := 0 // placeholders seen
	last := 0
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			i = skipQuoted(query, i)
		case c == '-' && i+1 < len(query) && query[i+1] == '-',
			c == '#' && i+1 < len(query) && (query[i+1] == ' ' || query[i+1] == '!'):
			if j := strings.IndexByte(query[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(query)
			}
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			i = skipBlockComment(query, i)
		case c == '$' && (i == 0 || !isWordByte(query[i-1])):
			i = skipHeredoc(query, i)
		case c == '?':
			b.WriteString(query[last:i])
			if n < len(args) {
				lit, err := literal(args[n])
				if err != nil {
					return "", fmt.Errorf("chdb: Bind arg %d: %w", n+1, err)
				}
				if lit[0] == '-' && i > 0 && query[i-1] == '-' {
					b.WriteByte(' ')
				}
				b.WriteString(lit)
			}
			n++
			i++
			last = i
		default:
			i++
		}
	}
	if n != len(args) {
		return "", fmt.Errorf("chdb: Bind: the query has %d placeholders but %d args were given", n, len(args))
	}
	b.WriteString(query[last:])
	return b.String(), nil
}

// skipQuoted returns the index after the quoted string or identifier that
// starts at q[i]; a backslash escapes the next byte and a doubled quote
// stands for one. An unterminated one runs to the end.
func skipQuoted(q string, i int) int {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			j++
		case quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q)
}

// skipBlockComment returns the index after the (possibly nested) /* */
// comment that starts at q[i].
func skipBlockComment(q string, i int) int {
	depth := 0
	for j := i; j+1 < len(q); j++ {
		switch {
		case q[j] == '/' && q[j+1] == '*':
			depth++
			j++
		case q[j] == '*' && q[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(q)
}

// skipHeredoc returns the index after the heredoc $tag$...$tag$ that starts
// at q[i], or i+1 when no heredoc starts there.
func skipHeredoc(q string, i int) int {
	j := i + 1
	for j < len(q) && isWordByte(q[j]) {
		j++
	}
	if j >= len(q) || q[j] != '$' {
		return i + 1
	}
	tag := q[i : j+1]
	if k := strings.Index(q[j+1:], tag); k >= 0 {
		return j + 1 + k + len(tag)
	}
	return len(q)
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= 0x80
}

// literal is the SQL literal of v.
func literal(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "NULL", nil
	case string:
		return quoteString(x), nil
	case []byte:
		return quoteString(string(x)), nil
	case bool:
		if x {
			return "1", nil
		}
		return "0", nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return formatFloat(x, 64), nil
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = quoteString(s)
		}
		return "[" + strings.Join(parts, ",") + "]", nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return quoteString(rv.String()), nil
	case reflect.Bool:
		return literal(rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32:
		return formatFloat(rv.Float(), 32), nil
	case reflect.Float64:
		return formatFloat(rv.Float(), 64), nil
	case reflect.Pointer:
		if rv.IsNil() {
			return "NULL", nil
		}
		return literal(rv.Elem().Interface())
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8 {
			return quoteString(string(rv.Bytes())), nil
		}
		parts := make([]string, rv.Len())
		for i := range parts {
			s, err := literal(rv.Index(i).Interface())
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ",") + "]", nil
	}
	return "", fmt.Errorf("unsupported type %T", v)
}

var stringEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`)

func quoteString(s string) string { return "'" + stringEscaper.Replace(s) + "'" }

func formatFloat(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

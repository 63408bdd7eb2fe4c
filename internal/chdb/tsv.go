package chdb

import (
	"bytes"
	"fmt"
)

// Null is the cell ParseTSVWithNames, QueryStrings and Rows give for a NULL
// (\N in the TSV). It starts with a NUL byte, so a real string collides with
// it only if it is exactly "\x00NULL". A constant: safe for concurrent use.
const Null = "\x00NULL"

// ParseTSVWithNames parses ClickHouse's TabSeparatedWithNames output, from
// chDB or from any clickhouse-server's HTTP interface (18.16's writes the same
// format): the first line holds the column names, each later line one row,
// fields separated by tabs and every line ended by a newline (a missing final
// newline is accepted). Names and cells are unescaped (\t \n \r \\ \' \0 \b
// \f, also \a \v \xHH and, as ClickHouse reads it, a backslash before any
// other byte stands for that byte); a cell that is exactly \N is NULL and
// comes back as Null. Empty input gives no columns and no rows. A row whose
// field count differs from the header's, or a field that ends in a lone
// backslash, is an error.
//
// Every cell is unescaped as a TSV string, which is exact for String and
// scalar columns. ClickHouse writes an Array, Tuple or Map cell in its own
// quoted text form without escaping it again for TSV, so such a cell comes
// back with one level of escapes undone (['it\'s'] gives ['it's']); select
// toJSONString(x) or arrayStringConcat(x, ...) where exact text matters.
// It keeps no state: safe for concurrent use.
func ParseTSVWithNames(b []byte) (cols []string, rows [][]string, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	line := 0
	for len(b) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			l, b = b[:i], b[i+1:]
		} else {
			l, b = b, nil
		}
		var fields []string
		if cols != nil {
			fields = make([]string, 0, len(cols))
		}
		for {
			f := l
			i := bytes.IndexByte(l, '\t')
			if i >= 0 {
				f, l = l[:i], l[i+1:]
			}
			s, err := unescapeTSV(f)
			if err != nil {
				return nil, nil, fmt.Errorf("chdb: TSV line %d field %d: %w", line, len(fields)+1, err)
			}
			fields = append(fields, s)
			if i < 0 {
				break
			}
		}
		if cols == nil {
			cols = fields
			continue
		}
		if len(fields) != len(cols) {
			return nil, nil, fmt.Errorf("chdb: TSV line %d has %d fields, the header %d", line, len(fields), len(cols))
		}
		rows = append(rows, fields)
	}
	return cols, rows, nil
}

// unescapeTSV decodes one TabSeparated field.
func unescapeTSV(f []byte) (string, error) {
	if len(f) == 2 && f[0] == '\\' && f[1] == 'N' {
		return Null, nil
	}
	i := bytes.IndexByte(f, '\\')
	if i < 0 {
		return string(f), nil
	}
	out := make([]byte, 0, len(f))
	for {
		out = append(out, f[:i]...)
		f = f[i:]
		if len(f) < 2 {
			return "", fmt.Errorf("lone backslash at the end")
		}
		c, n := f[1], 2
		switch c {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case '0':
			c = 0
		case 'a':
			c = '\a'
		case 'v':
			c = '\v'
		case 'x':
			if len(f) >= 4 && isHex(f[2]) && isHex(f[3]) {
				c, n = unhex(f[2])<<4|unhex(f[3]), 4
			}
		}
		out = append(out, c)
		f = f[n:]
		i = bytes.IndexByte(f, '\\')
		if i < 0 {
			return string(append(out, f...)), nil
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

package chddl

import (
	"embed"
	"fmt"
	"strings"
)

// Fragments are the SQL definitions that several statements share, each
// written once in fragments/<name>.sql: a migration names one on a line of
// its own as {name}, or {name WHERE <condition>} to restrict the rows the
// fragment reads (the fragment says where, with a {where} line; the
// condition may span lines and use {db}), and {name BY <columns>} or
// {name BY <columns> WHERE <condition>} to key cells by other columns than
// cell_id alone (the fragment writes {by} where the key goes; 0004 and later
// key by project, cell_id). Files expands them before
// computing a file's checksum, so the ledger records what was run.
//
//go:embed fragments/*.sql
var fragmentFS embed.FS

// fragment returns the text of fragments/<name>.sql.
func fragment(name string) (string, bool) {
	b, err := fragmentFS.ReadFile("fragments/" + name + ".sql")
	if err != nil {
		return "", false
	}
	return strings.TrimRight(string(b), "\n"), true
}

// defaultBy is what a fragment's {by} stands for unless the reference says
// otherwise: the cell id alone, as migrations 0002 and 0003 were released
// (their text, hence their checksums, do not change).
const defaultBy = "cell_id"

// fragmentWhere returns fragment name with its {where} line replaced by
// "WHERE cond", or dropped when cond is empty, and its {by} (the columns
// that identify a cell, grouped by and returned first) replaced by by, or
// by defaultBy when by is empty.
func fragmentWhere(name, by, cond string) (string, error) {
	text, ok := fragment(name)
	if !ok {
		return "", fmt.Errorf("chddl: no fragment %q (fragments/%s.sql)", name, name)
	}
	if by == "" {
		by = defaultBy
	}
	text = strings.ReplaceAll(text, "{by}", by)
	lines := strings.Split(text, "\n")
	out := lines[:0]
	found := false
	for _, l := range lines {
		if strings.TrimSpace(l) != "{where}" {
			out = append(out, l)
			continue
		}
		found = true
		if cond != "" {
			indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
			out = append(out, indent+"WHERE "+cond)
		}
	}
	if cond != "" && !found {
		return "", fmt.Errorf("chddl: fragment %q takes no WHERE", name)
	}
	return strings.Join(out, "\n"), nil
}

// expandFragments replaces every {name} and {name WHERE ...} reference in
// sql by its fragment. {db} and other unknown names are left as they are.
func expandFragments(sql string) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(sql, '{')
		if i < 0 {
			b.WriteString(sql)
			return b.String(), nil
		}
		end := matchingBrace(sql, i)
		if end < 0 {
			return "", fmt.Errorf("chddl: unbalanced { at %.40q", sql[i:])
		}
		ref := sql[i+1 : end]
		name, cond, _ := strings.Cut(ref, " ")
		if _, ok := fragment(name); !ok {
			b.WriteString(sql[:i+1]) // not a fragment: {db}
			sql = sql[i+1:]
			continue
		}
		cond = strings.TrimSpace(cond)
		var by string
		if rest, ok := strings.CutPrefix(cond, "BY "); ok {
			// {name BY a, b} or {name BY a, b WHERE condition}
			by, cond, _ = strings.Cut(rest, " WHERE ")
			by = strings.TrimSpace(by)
			if cond = strings.TrimSpace(cond); cond != "" {
				cond = "WHERE " + cond
			}
		}
		if cond != "" {
			kw, rest, _ := strings.Cut(cond, " ")
			if kw != "WHERE" {
				return "", fmt.Errorf("chddl: fragment reference {%s}: want {%s}, {%s WHERE condition}, {%s BY columns} or {%s BY columns WHERE condition}", ref, name, name, name, name)
			}
			cond = strings.TrimSpace(rest)
		}
		text, err := fragmentWhere(name, by, cond)
		if err != nil {
			return "", err
		}
		b.WriteString(sql[:i])
		b.WriteString(text)
		sql = sql[end+1:]
	}
}

// matchingBrace returns the index of the } closing the { at open, or -1.
func matchingBrace(s string, open int) int {
	depth := 0
	for j := open; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

package chddl

import (
	"strings"
	"testing"
)

// TestPrintedTablesHaveTheirFinalForm: every CREATE TABLE that Print (and a
// cluster's migrate, which applies the printed form) writes for a table
// 0007 rebuilds or widens has 0007's definition wherever an earlier file
// creates it; the sort keys Migrate rebuilds an older database with
// (rekeys) are those of the tables' final CREATE; and every column Migrate
// adds to an older table (addedColumns) is in that CREATE.
func TestPrintedTablesHaveTheirFinalForm(t *testing.T) {
	q := QuoteIdent("db")
	final := map[string]string{} // table → the last file's CREATE
	for _, f := range Files() {
		for _, s := range f.Statements("db", Legacy) {
			if m := tableRE.FindStringSubmatch(s); m != nil {
				final[m[2]] = s
			}
		}
	}
	for _, f := range Files() {
		for _, s := range f.Statements("db", Legacy) {
			m := tableRE.FindStringSubmatch(s)
			if m == nil {
				continue
			}
			p := printedStatement(f, s, "db", Legacy)
			pm := tableRE.FindStringSubmatch(p)
			if pm == nil || pm[2] != m[2] {
				t.Fatalf("%s: printed %q for %s", f.Name, p, m[2])
			}
			if key := final[m[2]]; strings.HasPrefix(key, "CREATE TABLE IF NOT EXISTS "+q+"."+m[2]+" (") && p != key && !inRekey4(m[2]) {
				t.Errorf("%s: %s printed as\n%s\nwant its final definition\n%s", f.Name, m[2], p, key)
			}
		}
	}
	for v, tables := range rekeys {
		for _, tb := range tables {
			if !strings.HasSuffix(final[tb.name], "ORDER BY "+tb.orderBy) && v != 4 {
				t.Errorf("migration %d rebuilds %s with ORDER BY %s; its final CREATE: %.80q", v, tb.name, tb.orderBy, final[tb.name])
			}
			if !strings.HasPrefix(tb.orderBy, "(project,") || !keyedByProject("ReplacingMergeTree(_version) ORDER BY "+tb.orderBy) {
				t.Errorf("%s: key %s does not start with project", tb.name, tb.orderBy)
			}
		}
	}
	for _, cols := range addedColumns {
		for _, c := range cols {
			if !strings.Contains(final[c.table], "    "+c.after+" String,\n    "+c.column+" "+c.typ+",\n") {
				t.Errorf("%s: the final CREATE lacks %s %s after %s", c.table, c.column, c.typ, c.after)
			}
		}
	}
}

// inRekey4 reports whether table is one of 0004's, whose final form is
// 0001's CREATE with 0004's key (no later file creates it).
func inRekey4(table string) bool {
	for _, tb := range rekeys[4] {
		if tb.name == table {
			return true
		}
	}
	return false
}

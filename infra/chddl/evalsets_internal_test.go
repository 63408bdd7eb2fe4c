package chddl

import (
	"strings"
	"testing"
)

// TestAddedColumnsTablesAreCreatedByTheirFile: every table a migration
// adds columns to (addedColumns) is created by that migration's own file,
// in its cluster form too: on a cluster addColumns drops the Distributed
// table for that CREATE to create again with the columns.
func TestAddedColumnsTablesAreCreatedByTheirFile(t *testing.T) {
	files := map[uint32]File{}
	for _, f := range Files() {
		files[f.Version] = f
	}
	for v, cols := range addedColumns {
		f, ok := files[v]
		if !ok {
			t.Fatalf("addedColumns names migration %d, which has no file", v)
		}
		stmts, err := printedStatements(f, "db", "hf", Legacy)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			found := false
			for _, s := range stmts {
				head, _, _ := strings.Cut(s, "\n")
				if strings.HasPrefix(head, "CREATE TABLE IF NOT EXISTS `db`."+c.table+" ON CLUSTER hf (") &&
					strings.Contains(s, "ENGINE = Distributed(") && strings.Contains(s, "\n    "+c.column+" "+c.typ+",\n") {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no Distributed CREATE of %s with %s %s", f.Name, c.table, c.column, c.typ)
			}
		}
	}
}

package chsink

import (
	"fmt"
	"time"

	"github.com/harnessflow/harnessflow/schemas"
)

// BuildColumns returns the table, column names and column-wise values that
// the sink would insert for evs (which must all belong to one table), with
// zero Kafka coordinates. It is exported for load tools that compare the
// sink's insert path with other clients on the same rows.
func BuildColumns(evs []schemas.Event) (tableName string, columns []string, data []any, err error) {
	if len(evs) == 0 {
		return "", nil, nil, fmt.Errorf("chsink: no events")
	}
	rows := make([]row, len(evs))
	var t *table
	for i, ev := range evs {
		tt, e := tableFor(ev)
		if tt == nil {
			return "", nil, nil, fmt.Errorf("chsink: event %d: %w: %T", i, schemas.ErrUnknownType, ev)
		}
		if t != nil && tt != t {
			return "", nil, nil, fmt.Errorf("chsink: event %d belongs to %s, not %s", i, tt.name, t.name)
		}
		t = tt
		rows[i] = row{ev: e}
	}
	return t.name, t.cols, t.build(rows, time.Now().UTC().Truncate(time.Second)), nil
}

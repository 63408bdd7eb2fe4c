package chx

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// QueryStrings runs query and returns the column names and every row with each
// value as text: NULL for null, floats with 10 significant digits (so that
// sums computed in a different order compare equal), times in UTC RFC 3339,
// arrays and tuples in Go's %v form. It is meant for small results: reports,
// examples and comparing whole views in tests.
func QueryStrings(ctx context.Context, conn driver.Conn, query string, args ...any) ([]string, [][]string, error) {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cols := rows.Columns()
	types := rows.ColumnTypes()
	var out [][]string
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		rec := make([]string, len(dest))
		for i, d := range dest {
			rec[i] = FormatValue(reflect.ValueOf(d).Elem().Interface())
		}
		out = append(out, rec)
	}
	return cols, out, rows.Err()
}

// FormatValue renders one scanned value the way QueryStrings does.
func FormatValue(v any) string {
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "NULL"
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return "NULL"
	}
	switch x := rv.Interface().(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', 10, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', 10, 32)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case string:
		return x
	case []byte:
		return string(x)
	}
	if rv.Kind() == reflect.Slice {
		s := "["
		for i := 0; i < rv.Len(); i++ {
			if i > 0 {
				s += ","
			}
			s += FormatValue(rv.Index(i).Interface())
		}
		return s + "]"
	}
	return fmt.Sprint(rv.Interface())
}

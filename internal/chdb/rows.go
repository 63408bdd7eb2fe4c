package chdb

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Query binds args to query's ? placeholders (see Bind), runs it and returns
// its result as driver.Rows, the interface clickhouse-go's connections
// return, so code written against a clickhouse-go connection (such as
// sinks/report's Querier) runs on chDB too. The whole result is read
// before Query returns. See NewRows for what Scan accepts. Safe for
// concurrent use.
func (s *Session) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	q, err := Bind(query, args...)
	if err != nil {
		return nil, err
	}
	cols, rows, err := s.QueryStrings(ctx, q)
	if err != nil {
		return nil, err
	}
	return NewRows(cols, rows), nil
}

// NewRows returns driver.Rows over text cells, such as ParseTSVWithNames
// gives (Null for NULL). Scan converts each cell to its destination:
// *string, *int64, *int32, *int, *uint64, *uint32, *uint8, *float64, *bool,
// and pointers to other int, uint, float, bool and string kinds; *any gets
// the cell as a string (nil for NULL); a pointer to a pointer of one of
// these (**float64, **string, **int64, ...) gets nil for NULL. NULL into any
// other destination is an error naming the column, as is a cell that does
// not parse. Floats take ClickHouse's nan, inf and -inf. ColumnTypes returns
// nil; ScanStruct and Totals return an error (not supported).
//
// Like database/sql's and clickhouse-go's rows, the result is not safe for
// concurrent use; read it from one goroutine.
func NewRows(cols []string, rows [][]string) driver.Rows {
	return &tsvRows{cols: cols, rows: rows, cur: -1}
}

type tsvRows struct {
	cols   []string
	rows   [][]string
	cur    int
	closed bool
}

func (r *tsvRows) Next() bool {
	if r.closed || r.cur >= len(r.rows) {
		return false
	}
	r.cur++
	return r.cur < len(r.rows)
}

func (r *tsvRows) Scan(dest ...any) error {
	if r.closed {
		return errors.New("chdb: Scan on closed rows")
	}
	if r.cur < 0 || r.cur >= len(r.rows) {
		return errors.New("chdb: Scan without a row (call Next first)")
	}
	if len(dest) != len(r.cols) {
		return fmt.Errorf("chdb: Scan got %d destinations for %d columns", len(dest), len(r.cols))
	}
	row := r.rows[r.cur]
	for i, d := range dest {
		if err := scanCell(row[i], d); err != nil {
			return fmt.Errorf("chdb: Scan column %d (%s): %w", i+1, r.cols[i], err)
		}
	}
	return nil
}

func (r *tsvRows) ScanStruct(any) error {
	return errors.New("chdb: ScanStruct not supported")
}

func (r *tsvRows) ColumnTypes() []driver.ColumnType { return nil }

func (r *tsvRows) Totals(...any) error {
	return errors.New("chdb: Totals not supported")
}

func (r *tsvRows) Columns() []string { return append([]string(nil), r.cols...) }

func (r *tsvRows) Close() error {
	r.closed = true
	return nil
}

func (r *tsvRows) Err() error { return nil }

func (r *tsvRows) HasData() bool { return len(r.rows) > 0 }

var errNull = errors.New("NULL into a non-pointer destination (scan into a pointer to a pointer, e.g. **float64, to take NULL)")

// scanCell stores the text cell in dest.
func scanCell(cell string, dest any) error {
	switch d := dest.(type) {
	case *string:
		if cell == Null {
			return errNull
		}
		*d = cell
		return nil
	case *int64:
		return scanInt(cell, d, 64)
	case *int32:
		return scanInt(cell, d, 32)
	case *int:
		return scanInt(cell, d, strconv.IntSize)
	case *uint64:
		return scanUint(cell, d, 64)
	case *uint32:
		return scanUint(cell, d, 32)
	case *uint8:
		return scanUint(cell, d, 8)
	case *float64:
		if cell == Null {
			return errNull
		}
		f, err := parseFloat(cell, 64)
		if err != nil {
			return err
		}
		*d = f
		return nil
	case *bool:
		if cell == Null {
			return errNull
		}
		v, err := strconv.ParseBool(cell)
		if err != nil {
			return err
		}
		*d = v
		return nil
	case **float64:
		return scanPtr(cell, d)
	case **string:
		return scanPtr(cell, d)
	case **int64:
		return scanPtr(cell, d)
	case *any:
		if cell == Null {
			*d = nil
		} else {
			*d = cell
		}
		return nil
	case nil:
		return errors.New("nil destination")
	}
	rv := reflect.ValueOf(dest)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("unsupported destination %T", dest)
	}
	e := rv.Elem()
	if e.Kind() == reflect.Pointer {
		if cell == Null {
			e.SetZero()
			return nil
		}
		p := reflect.New(e.Type().Elem())
		if err := scanValue(cell, p.Elem(), dest); err != nil {
			return err
		}
		e.Set(p)
		return nil
	}
	if cell == Null {
		return errNull
	}
	return scanValue(cell, e, dest)
}

// scanValue stores a non-NULL cell in v, a settable value of a basic kind.
func scanValue(cell string, v reflect.Value, dest any) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(cell)
	case reflect.Bool:
		b, err := strconv.ParseBool(cell)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(cell, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(cell, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := parseFloat(cell, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported destination %T", dest)
	}
	return nil
}

func scanInt[T int64 | int32 | int](cell string, d *T, bits int) error {
	if cell == Null {
		return errNull
	}
	n, err := strconv.ParseInt(cell, 10, bits)
	if err != nil {
		return err
	}
	*d = T(n)
	return nil
}

func scanUint[T uint64 | uint32 | uint8](cell string, d *T, bits int) error {
	if cell == Null {
		return errNull
	}
	n, err := strconv.ParseUint(cell, 10, bits)
	if err != nil {
		return err
	}
	*d = T(n)
	return nil
}

func scanPtr[T any](cell string, d **T) error {
	if cell == Null {
		*d = nil
		return nil
	}
	v := new(T)
	if err := scanCell(cell, v); err != nil {
		return err
	}
	*d = v
	return nil
}

// parseFloat parses a float as ClickHouse writes it (nan, -nan, inf, -inf
// included).
func parseFloat(s string, bits int) (float64, error) {
	if strings.EqualFold(strings.TrimLeft(s, "+-"), "nan") {
		s = "nan"
	}
	return strconv.ParseFloat(s, bits)
}

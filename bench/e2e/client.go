package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// FindClient locates clickhouse-client: bin when given (a "clickhouse"
// multi-call binary gets the "client" argument), else clickhouse-client or
// "clickhouse client" on PATH. It returns the executable and its leading
// arguments.
func FindClient(bin string) (string, []string, error) {
	if bin != "" {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", nil, fmt.Errorf("clickhouse client %q: %w", bin, err)
		}
		if filepath.Base(p) == "clickhouse" {
			return p, []string{"client"}, nil
		}
		return p, nil, nil
	}
	if p, err := exec.LookPath("clickhouse-client"); err == nil {
		return p, nil, nil
	}
	if p, err := exec.LookPath("clickhouse"); err == nil {
		return p, []string{"client"}, nil
	}
	return "", nil, ErrNoClient
}

// SplitHostPort splits a native-protocol address; the port defaults to 9000.
func SplitHostPort(addr string) (host, port string) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return addr, "9000"
	}
	return addr[:i], addr[i+1:]
}

// TimeClient runs clickhouse-client with query, file as its stdin, and
// returns the seconds it took.
func TimeClient(ctx context.Context, client string, pre []string, host, port, file, query string) (float64, error) {
	wall, _, err := RunClient(ctx, client, pre, host, port, file, query)
	return wall, err
}

// RunClient is TimeClient that also returns the client process's CPU
// seconds (user + system).
func RunClient(ctx context.Context, client string, pre []string, host, port, file, query string) (wall, cpu float64, err error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	args := append(append([]string{}, pre...), "--host", host, "--port", port, "--query", query)
	c := exec.CommandContext(ctx, client, args...)
	c.Stdin = f
	var stderr strings.Builder
	c.Stderr = &stderr
	t0 := time.Now()
	if err := c.Run(); err != nil {
		return 0, 0, fmt.Errorf("%s %s: %w: %s", client, query, err, strings.TrimSpace(stderr.String()))
	}
	wall = time.Since(t0).Seconds()
	if ps := c.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return wall, cpu, nil
}

// WriteTSV writes column-wise data (as chsink.BuildColumns returns it) as
// TabSeparated rows.
func WriteTSV(w io.Writer, data []any) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	cols := make([]reflect.Value, len(data))
	for i, d := range data {
		cols[i] = reflect.ValueOf(d)
	}
	n := cols[0].Len()
	var buf []byte
	for r := 0; r < n; r++ {
		buf = buf[:0]
		for c := range cols {
			if c > 0 {
				buf = append(buf, '\t')
			}
			buf = AppendTSV(buf, cols[c].Index(r).Interface())
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

var tsvEscaper = strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n", "'", "\\'")

// AppendTSV appends one value in TabSeparated form.
func AppendTSV(b []byte, v any) []byte {
	switch x := v.(type) {
	case string:
		return append(b, tsvEscaper.Replace(x)...)
	case int32:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint8:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return append(b, "nan"...)
		}
		return strconv.AppendFloat(b, x, 'g', -1, 64)
	case *float64:
		if x == nil {
			return append(b, `\N`...)
		}
		return strconv.AppendFloat(b, *x, 'g', -1, 64)
	case time.Time:
		return x.UTC().AppendFormat(b, "2006-01-02 15:04:05")
	case []string:
		b = append(b, '[')
		for i, s := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '\'')
			b = append(b, tsvEscaper.Replace(s)...)
			b = append(b, '\'')
		}
		return append(b, ']')
	case []float64:
		b = append(b, '[')
		for i, f := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, f, 'g', -1, 64)
		}
		return append(b, ']')
	}
	return append(b, fmt.Sprint(v)...)
}

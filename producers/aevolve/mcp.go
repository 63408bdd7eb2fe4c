package aevolve

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// readMCP reads summary.csv: task_id,result,score,elapsed_s,output_len,detail[,evo_cycle].
func (im *importer) readMCP(c *cellState) {
	const rel = "summary.csv"
	f := &FileReport{Path: im.rel(c.fs.path(rel))}
	defer im.file(f)
	data, err := c.fs.readFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		f.skip("missing")
		return
	} else if err != nil {
		im.refuse(f, err)
		return
	}
	recs, lines := readCSV(bytes.TrimPrefix(data, []byte("\ufeff")), f)
	if len(recs) == 0 {
		f.skip("unparseable csv")
		return
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.TrimSpace(strings.ToLower(h))] = i
	}
	get := func(rec []string, k string) string {
		if i, ok := col[k]; ok && i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	if _, ok := col["task_id"]; !ok {
		f.skip("no task_id column")
		return
	}
	shift := int32(0)
	if _, ok := col["evo_cycle"]; ok {
		for _, rec := range recs[1:] {
			if get(rec, "evo_cycle") == "0" {
				shift = 1 // evo_cycle 0 is round 1
			}
		}
	}
	for i, rec := range recs[1:] {
		line := lines[i+1]
		id := get(rec, "task_id")
		if id == "" {
			f.skip("no task_id")
			continue
		}
		status := schemas.StatusOK
		switch strings.ToUpper(get(rec, "result")) {
		case "PASS", "FAIL":
		case "INTERRUPTED":
			status = schemas.StatusInterrupted
		case "ERROR":
			status = schemas.StatusError
		case "TIMEOUT":
			status = schemas.StatusTimeout
		default:
			f.skip("unknown result")
			continue
		}
		score, err := strconv.ParseFloat(get(rec, "score"), 64)
		if err != nil {
			if status == schemas.StatusOK {
				f.skip("bad score")
				continue
			}
			score = 0
		}
		cycle := c.obsCycle[id]
		if ec := get(rec, "evo_cycle"); ec != "" {
			n, err := strconv.ParseInt(ec, 10, 32)
			if err != nil || n < 0 || n+int64(shift) > math.MaxInt32 {
				f.skip(fmt.Sprintf("evo_cycle out of range (line %d: %q; want 0 to %d)", line, ec, math.MaxInt32-1))
				continue
			}
			cycle = int32(n) + shift
		}
		el, _ := strconv.ParseFloat(get(rec, "elapsed_s"), 64)
		if reason := c.add(id, 1, cycle, status, score, score >= MCPSuccessScore, true, nil, int64(el*1000)); reason != "" {
			f.skip(reason)
			continue
		}
		f.Read++
	}
}

// maxCSVLineReasons is how many malformed rows readCSV names by line; the
// rest are counted under one reason.
const maxCSVLineReasons = 10

// readCSV parses data strictly (RFC 4180 quoting). A malformed row (a
// stray quote) costs that row only: it is reported in f with its line
// number and parsing resumes on the next line, where a lenient parser
// would swallow every row after it into one field. It returns the records
// and the line each starts on.
func readCSV(data []byte, f *FileReport) (recs [][]string, lines []int) {
	base := 0 // lines of data consumed before the current reader
	bad := 0
	for len(data) > 0 {
		r := csv.NewReader(bytes.NewReader(data))
		r.FieldsPerRecord = -1
		r.ReuseRecord = false
		for {
			rec, err := r.Read()
			if err == io.EOF {
				return recs, lines
			}
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				bad++
				if bad <= maxCSVLineReasons {
					f.skip(fmt.Sprintf("malformed csv row (line %d: %v)", base+pe.StartLine, pe.Err))
				} else {
					f.skip("malformed csv rows past the first " + strconv.Itoa(maxCSVLineReasons))
				}
				// Resume after the first line of the bad row.
				skip := pe.StartLine
				for range skip {
					i := bytes.IndexByte(data, '\n')
					if i < 0 {
						return recs, lines
					}
					data = data[i+1:]
				}
				base += skip
				break
			}
			if err != nil {
				f.skip("unreadable csv: " + err.Error())
				return recs, lines
			}
			line, _ := r.FieldPos(0)
			recs = append(recs, rec)
			lines = append(lines, base+line)
		}
	}
	return recs, lines
}

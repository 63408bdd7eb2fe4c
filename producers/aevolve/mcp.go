package aevolve

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// readMCP reads summary.csv: task_id,result,score,elapsed_s,output_len,detail[,evo_cycle].
func (im *importer) readMCP(c *cellState) {
	p := filepath.Join(c.dir, "summary.csv")
	f := &FileReport{Path: im.rel(p)}
	defer im.file(f)
	file, err := os.Open(p)
	if err != nil {
		f.skip("missing")
		return
	}
	defer file.Close()
	r := csv.NewReader(file)
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	recs, err := r.ReadAll()
	if err != nil || len(recs) == 0 {
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
	for _, rec := range recs[1:] {
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
			n, err := strconv.Atoi(ec)
			if err != nil {
				f.skip("bad evo_cycle")
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

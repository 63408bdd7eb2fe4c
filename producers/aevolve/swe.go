package aevolve

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// readSWE reads results.json: a list of per-task results.
func (im *importer) readSWE(c *cellState) {
	const rel = "results.json"
	f := &FileReport{Path: im.rel(c.fs.path(rel))}
	defer im.file(f)
	data, err := c.fs.readFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		f.skip("unreadable")
		return
	} else if err != nil {
		im.refuse(f, err)
		return
	}
	var list []map[string]any
	if err := parseLoose(data, &list); err != nil {
		// Some runs write one object per line.
		f.Reasons = nil
		im.jsonl(c.fs, rel, f, func(m map[string]any) string { return c.sweRow(m) })
		return
	}
	for _, m := range list {
		if m == nil {
			f.skip("not an object")
			continue
		}
		if _, ok := m["_record_type"]; ok {
			f.skip("trailer record")
			continue
		}
		if r := c.sweRow(m); r != "" {
			f.skip(r)
			continue
		}
		f.Read++
	}
}

// sweRow adds the attempt of one results.json object; it returns a skip
// reason or "".
func (c *cellState) sweRow(m map[string]any) string {
	id := str(m, "instance_id")
	if id == "" {
		id = str(m, "task_id")
	}
	if id == "" {
		return "no instance_id"
	}
	success, ok := boolean(m, "success")
	if !ok {
		return "no success"
	}
	score, ok := number(m, "score")
	if !ok {
		score = b2f(success)
	}
	status := schemas.StatusOK
	if e := str(m, "error"); e != "" {
		status = schemas.StatusError
		if strings.Contains(strings.ToLower(e), "timeout") {
			status = schemas.StatusTimeout
		}
	}
	el, _ := number(m, "elapsed")
	return c.add(id, 1, c.obsCycle[id], status, score, success, true, nil, int64(el*1000))
}

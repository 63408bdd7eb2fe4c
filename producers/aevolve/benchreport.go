package aevolve

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// readReport parses BENCHMARK_REPORT.md's "key: value" lines.
func (im *importer) readReport(c *cellState) map[string]string {
	const rel = "BENCHMARK_REPORT.md"
	rep := map[string]string{}
	f := &FileReport{Path: im.rel(c.fs.path(rel))}
	data, err := c.fs.readFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		f.skip("missing")
		im.file(f)
		return rep
	} else if err != nil {
		im.refuse(f, err)
		im.file(f)
		return rep
	}
	for _, line := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(line)
		l = strings.TrimLeft(l, "-*> ")
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			if l != "" {
				f.skip("not key: value")
			}
			continue
		}
		k = strings.ToLower(strings.Trim(strings.TrimSpace(k), "*`_ "))
		v = strings.Trim(strings.TrimSpace(v), "*` ")
		if k == "" || strings.ContainsAny(k, " \t") {
			f.skip("not key: value")
			continue
		}
		rep[k] = v
		f.Read++
	}
	if m := rep["done_marker"]; m != "" && !filepath.IsLocal(m) {
		f.skip("done_marker not a path inside the cell directory (absolute or climbing out with ..): ignored")
	}
	im.file(f)
	return rep
}

package aevolve

import (
	"os"
	"strings"
)

// readReport parses BENCHMARK_REPORT.md's "key: value" lines.
func (im *importer) readReport(path string) map[string]string {
	rep := map[string]string{}
	f := &FileReport{Path: im.rel(path)}
	data, err := os.ReadFile(path)
	if err != nil {
		f.skip("missing")
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
	im.file(f)
	return rep
}

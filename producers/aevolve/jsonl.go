package aevolve

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
)

// jsonl reads a JSON-lines file (Python reprs accepted), calling fn with each
// object; trailer records (with _record_type) are skipped.
func (im *importer) jsonl(fsys *cellFS, rel string, f *FileReport, fn func(map[string]any) string) {
	file, err := fsys.open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			f.skip("unreadable")
			return
		}
		im.refuse(f, err)
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := parseLoose(line, &m); err != nil || m == nil {
			f.skip("unparseable")
			continue
		}
		if _, ok := m["_record_type"]; ok {
			f.skip("trailer record")
			continue
		}
		if reason := fn(m); reason != "" {
			f.skip(reason)
			continue
		}
		f.Read++
	}
	if err := sc.Err(); errors.Is(err, ErrRefused) {
		im.refuse(f, err)
	} else if err != nil {
		f.skip("read error: " + err.Error())
	}
}

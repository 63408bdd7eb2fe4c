package aevolve

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// cellName matches <solver>_x_<evolver>_<bm>_s<seed>.
var cellName = regexp.MustCompile(`^(.+?)_x_(.+)_(swe|mcp|sb)_s(\d+)$`)

// ParseCellName splits an A-Evolve cell directory name
// (<solver>_x_<evolver>_<bm>_s<seed>); evolver "none" is returned as "".
func ParseCellName(name string) (agent, evolver, benchmark string, seed int32, ok bool) {
	m := cellName.FindStringSubmatch(name)
	if m == nil {
		return "", "", "", 0, false
	}
	s, err := strconv.ParseInt(m[4], 10, 32)
	if err != nil {
		return "", "", "", 0, false
	}
	evolver = m[2]
	if evolver == "none" {
		evolver = ""
	}
	return m[1], evolver, m[3], int32(s), true
}

// FindCells returns the cell directories under dir (dir itself if it is
// one), sorted by path. A cell directory that is a symbolic link is not
// returned: the importer refuses it (see Import), since a link could bring
// any directory of the machine into the run.
func FindCells(dir string) ([]string, error) {
	cells, _, err := scanCells(dir)
	paths := make([]string, len(cells))
	for i, c := range cells {
		paths[i] = c.path
	}
	return paths, err
}

// cellDir is a cell directory found under the run directory.
type cellDir struct {
	path string
	// info is the directory as the scan saw it (not following links):
	// openCell checks that the directory it opens is this one, so that a
	// cell swapped for a link after the scan is refused too.
	info fs.FileInfo
}

// scanCells returns the cell directories under dir (dir itself if it is
// one), sorted by path, and, sorted too, the entries named like a cell
// directory that are symbolic links (to a directory or not): those are
// refused, not followed. Other links are not followed either (no loops).
func scanCells(dir string) (cells []cellDir, links []string, err error) {
	clean := filepath.Clean(dir)
	if _, _, _, _, ok := ParseCellName(filepath.Base(clean)); ok {
		st, err := os.Lstat(clean)
		switch {
		case err != nil:
			return nil, nil, err
		case st.Mode()&fs.ModeSymlink != 0:
			return nil, []string{dir}, nil
		case !st.IsDir():
			return nil, nil, nil
		}
		return []cellDir{{path: dir, info: st}}, nil, nil
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if _, _, _, _, ok := ParseCellName(d.Name()); ok {
				links = append(links, p)
			}
			return nil
		}
		if !d.IsDir() || p == dir {
			return nil
		}
		if d.Name() == "workspace" || d.Name() == ".git" || d.Name() == "outputs" {
			return fs.SkipDir
		}
		if _, _, _, _, ok := ParseCellName(d.Name()); ok {
			st, err := d.Info()
			if err != nil {
				return err
			}
			cells = append(cells, cellDir{path: p, info: st})
			return fs.SkipDir
		}
		return nil
	})
	sort.Slice(cells, func(i, j int) bool { return cells[i].path < cells[j].path })
	sort.Strings(links)
	return cells, links, err
}

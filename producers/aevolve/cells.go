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
// one), sorted by path.
func FindCells(dir string) ([]string, error) {
	if _, _, _, _, ok := ParseCellName(filepath.Base(filepath.Clean(dir))); ok {
		return []string{dir}, nil
	}
	var cells []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// A cell linked into the tree (runs gathered from several
			// disks) is a cell; other links are not followed (no loops).
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				if _, _, _, _, ok := ParseCellName(d.Name()); ok {
					cells = append(cells, p)
				}
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
			cells = append(cells, p)
			return fs.SkipDir
		}
		return nil
	})
	sort.Strings(cells)
	return cells, err
}

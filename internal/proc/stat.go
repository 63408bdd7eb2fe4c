package proc

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// ReadStat reads the stat file at path (/proc/PID/stat, /proc/self/task/TID/stat)
// and returns its StatFields. It fails where /proc is not available or the process
// or thread is gone.
func ReadStat(path string, min int) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return StatFields(b, min)
}

// StatFields returns the fields after the command name of a stat line: element 0
// is field 3 (state), so field n (as proc(5) numbers them) is element n-3.
// The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted after the last ')'. It fails
// when the line has fewer than min fields after the name.
func StatFields(b []byte, min int) ([]string, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc stat line without a command name: %.40q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < min {
		return nil, fmt.Errorf("/proc stat line with %d fields after the name, want >= %d", len(f), min)
	}
	return f, nil
}

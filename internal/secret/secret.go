// Package secret reads the files that hold credentials (passwords, tokens,
// SASL users): one way, with one set of checks, for every command.
package secret

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// ReadFile reads the secret file at path; what names it in errors ("score
// token file"). A file that group or others may read is refused, with the
// chmod to run; a leading UTF-8 byte order mark is dropped. The mode is
// checked on the opened file, so the file read is the file checked.
func ReadFile(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("%s %s is readable by group or others (mode %v): chmod 600 %s", what, path, perm, path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return bytes.TrimPrefix(b, utf8BOM), nil
}

// FirstLine is ReadFile's first line, without its line ending or
// surrounding spaces (a password or a token); an empty one is an error.
func FirstLine(path, what string) (string, error) {
	b, err := ReadFile(path, what)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("%s %s is empty", what, path)
	}
	return line, nil
}

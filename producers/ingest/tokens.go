package ingest

import (
	"bufio"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
)

// LoadTokens reads a tokens file: one "TOKEN PROJECT" pair per line, separated
// by spaces or tabs; blank lines and lines starting with # are ignored. It
// returns token → project, or every problem joined (each wrapping
// ErrBadTokensFile, with its line number).
func LoadTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTokensFile, err)
	}
	defer f.Close()
	out := map[string]string{}
	var errs []error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			errs = append(errs, fmt.Errorf("%w: %s line %d: want \"TOKEN PROJECT\", got %d fields", ErrBadTokensFile, path, n, len(fields)))
			continue
		}
		if _, dup := out[fields[0]]; dup {
			errs = append(errs, fmt.Errorf("%w: %s line %d: token listed twice", ErrBadTokensFile, path, n))
			continue
		}
		out[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %v", ErrBadTokensFile, path, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// tokenSet checks bearer tokens in constant time with respect to their
// contents: every known token is compared, whatever matches.
type tokenSet struct {
	tokens   [][]byte
	projects []string
}

func newTokenSet(m map[string]string) *tokenSet {
	ts := &tokenSet{}
	for tok, proj := range m {
		ts.tokens = append(ts.tokens, []byte(tok))
		ts.projects = append(ts.projects, proj)
	}
	return ts
}

// project returns the project of tok, or false.
func (ts *tokenSet) project(tok string) (string, bool) {
	b := []byte(tok)
	found := -1
	for i, t := range ts.tokens {
		if subtle.ConstantTimeCompare(b, t) == 1 {
			found = i
		}
	}
	if found < 0 || tok == "" {
		return "", false
	}
	return ts.projects[found], true
}

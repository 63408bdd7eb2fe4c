package ingest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/harnessflow/harnessflow/internal/secret"
)

// LoadTokens reads a tokens file: one "TOKEN PROJECT" pair per line, separated
// by spaces or tabs; blank lines and lines starting with # are ignored; a
// UTF-8 byte order mark at the start is stripped (it would otherwise become
// part of the first token). The file holds secrets: one that group or others
// may read or write is refused (outside Windows), with the chmod that fixes
// it. It returns token → project, or every problem joined (each wrapping
// ErrBadTokensFile, with its line number).
func LoadTokens(path string) (map[string]string, error) {
	data, err := secret.ReadFile(path, "tokens file")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadTokensFile, err)
	}
	out := map[string]string{}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
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
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrBadTokensFile, path, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// tokenSet checks bearer tokens in constant time with respect to their
// contents and lengths: it compares the SHA-256 digest of the token
// presented with the digest of every known token, whatever matches.
type tokenSet struct {
	digests  [][sha256.Size]byte
	projects []string
}

func newTokenSet(m map[string]string) *tokenSet {
	ts := &tokenSet{}
	for tok, proj := range m {
		ts.digests = append(ts.digests, sha256.Sum256([]byte(tok)))
		ts.projects = append(ts.projects, proj)
	}
	return ts
}

// len is the number of tokens (their indexes are 0 to len-1).
func (ts *tokenSet) len() int { return len(ts.digests) }

// lookup returns the index and project of tok, or false.
func (ts *tokenSet) lookup(tok string) (int, string, bool) {
	d := sha256.Sum256([]byte(tok))
	found := -1
	for i := range ts.digests {
		if subtle.ConstantTimeCompare(d[:], ts.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 || tok == "" {
		return -1, "", false
	}
	return found, ts.projects[found], true
}

// bearer returns the token of an Authorization header of the Bearer scheme
// (its name in any case, RFC 9110 §11.1), or false.
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authorize returns the index and project of r's bearer token, or false.
func (s *Server) authorize(r *http.Request) (int, string, bool) {
	tok, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return -1, "", false
	}
	return s.tokens.lookup(tok)
}

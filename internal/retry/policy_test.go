package retry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnePolicy fails on a backoff built or run outside internal/retry
// (backoff.NewExponentialBackOff, backoff.Retry*, backoff.Permanent, …): the
// module had eleven hand-made policies, two of which never reset after a
// recovery. Loops use retry.Do, retry.Restarts or Policy.NewBackOff.
func TestOnePolicy(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	banned := map[string]bool{"NewExponentialBackOff": true, "NewConstantBackOff": true, "Retry": true, "RetryNotify": true,
		"RetryWithData": true, "RetryNotifyWithData": true, "RetryNotifyWithTimer": true, "Permanent": true, "WithMaxRetries": true}
	files := 0
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if b := d.Name(); rel == filepath.Join("internal", "retry") || b == "testdata" || b == "node_modules" || (strings.HasPrefix(b, ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name := ""
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == "github.com/cenkalti/backoff/v4" {
				name = "backoff"
				if im.Name != nil {
					name = im.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && banned[sel.Sel.Name] {
					found = append(found, fset.Position(sel.Pos()).String()+": backoff."+sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d Go files: not the module's tree", files)
	}
	for _, f := range found {
		t.Errorf("%s outside internal/retry: use retry.Do, retry.Restarts or retry.Policy", f)
	}
}

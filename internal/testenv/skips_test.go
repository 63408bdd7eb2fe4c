package testenv_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSkipsOutsideShortAndMissing fails on a Skip, Skipf or SkipNow call
// in the module's tests unless it sits under an `if` on testing.Short() or
// on NVIDIAPresent() (CI machines have no GPU; the GPU tests run on a lent
// one): a test that lacks any other part it needs calls testenv.Missing,
// which fails under CI=true (CI installs every part; a skip there hides a
// test that never ran) and skips elsewhere.
func TestNoSkipsOutsideShortAndMissing(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: not the module's root", root)
	}
	var found []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if b := d.Name(); b == "testdata" || b == "node_modules" || (strings.HasPrefix(b, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		found = append(found, skipCalls(t, rel, src)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked %d test files under %s: not the module's tree", files, root)
	}
	for _, f := range found {
		t.Errorf("%s: a skip outside `if testing.Short()` or `if !NVIDIAPresent()`; call testenv.Missing for a missing part", f)
	}
}

// skipCalls returns file:line of every Skip, Skipf or SkipNow call in src
// that no enclosing `if` on testing.Short() or NVIDIAPresent() guards.
func skipCalls(t *testing.T, name string, src []byte) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	var out []string
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Skip" && sel.Sel.Name != "Skipf" && sel.Sel.Name != "SkipNow") {
			return true
		}
		for _, outer := range stack {
			if is, ok := outer.(*ast.IfStmt); ok && allowedGuard(is.Cond) {
				return true
			}
		}
		out = append(out, fset.Position(call.Pos()).String())
		return true
	})
	return out
}

// allowedGuard reports whether e calls testing.Short() or a NVIDIAPresent
// function (of any package).
func allowedGuard(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "testing" && n.Sel.Name == "Short" {
				found = true
			}
			if n.Sel.Name == "NVIDIAPresent" {
				found = true
			}
		case *ast.Ident:
			if n.Name == "NVIDIAPresent" {
				found = true
			}
		}
		return !found
	})
	return found
}

// TestSkipCallsFindsUnguardedSkips checks the finder on a planted file.
func TestSkipCallsFindsUnguardedSkips(t *testing.T) {
	t.Parallel()
	src := []byte(`package x
import "testing"
func TestA(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := lookup(); err != nil {
		t.Skipf("no tool: %v", err)
	}
	t.SkipNow()
	if !backend.NVIDIAPresent() {
		t.Skip("no GPU")
	}
}
`)
	got := skipCalls(t, "x_test.go", src)
	if len(got) != 2 || !strings.HasPrefix(got[0], "x_test.go:8:") || !strings.HasPrefix(got[1], "x_test.go:10:") {
		t.Fatalf("found %v, want the Skipf of line 8 and the SkipNow of line 10", got)
	}
}

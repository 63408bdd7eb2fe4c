package obs_test

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

// TestErrorsKeepTheirCause fails on an fmt.Errorf in the module's non-test
// code that formats an error with %v or %s instead of wrapping it with %w:
// the cause is then lost to errors.Is and errors.As (a permission error
// read as a corrupt checkpoint, a Kafka error no caller could classify).
// An error value is recognised by its name (err, or a name ending in err
// or Err) or an .Err() call.
func TestErrorsKeepTheirCause(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			base := d.Name()
			if base == "testdata" || base == "node_modules" || (strings.HasPrefix(base, ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		calls, err := unwrappedErrors(rel, src)
		if err != nil {
			return err
		}
		found = append(found, calls...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked %d Go files under %s: not the module's tree", files, root)
	}
	for _, f := range found {
		t.Errorf("%s: wrap the error with %%w (several causes: %%w: %%w) so that errors.Is and errors.As see it", f)
	}
}

// TestUnwrappedErrorsFindsEveryForm keeps the check above honest.
func TestUnwrappedErrorsFindsEveryForm(t *testing.T) {
	t.Parallel()
	src := `package p
import "fmt"
func g(err, closeErr error, ctx interface{ Err() error }, n int) {
	_ = fmt.Errorf("a: %v", err)
	_ = fmt.Errorf("%w: %d of %s: %v", err, n, "x", closeErr)
	_ = fmt.Errorf("c: %s", ctx.Err())
	_ = fmt.Errorf("100%% of %v: %w", n, err)
	_ = fmt.Errorf("%w (%w)", err, closeErr)
	_ = fmt.Sprintf("%v", err)
}
`
	got, err := unwrappedErrors("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go:4 %v of err", "p.go:5 %v of closeErr", "p.go:6 %s of ctx.Err()"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("unwrappedErrors found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// unwrappedErrors returns "file:line verb of arg" for each error argument
// of an fmt.Errorf in src that is formatted with another verb than %w.
func unwrappedErrors(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, isID := sel.X.(*ast.Ident); !isID || pkg.Name != "fmt" || sel.Sel.Name != "Errorf" {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok {
			return true
		}
		format, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		for i, verb := range verbs(format) {
			if i+1 >= len(call.Args) || verb == 'w' {
				continue
			}
			if desc, isErr := errorArg(call.Args[i+1]); isErr {
				out = append(out, name+":"+strconv.Itoa(fset.Position(call.Pos()).Line)+" %"+string(verb)+" of "+desc)
			}
		}
		return true
	})
	return out, nil
}

// verbs lists the verbs of a format string in order (%% is none).
func verbs(format string) []rune {
	var out []rune
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		j := i + 1
		for j < len(format) && strings.ContainsRune("+-# 0123456789.[]*", rune(format[j])) {
			j++
		}
		if j < len(format) && format[j] != '%' {
			out = append(out, rune(format[j]))
		}
		i = j
	}
	return out
}

// errorArg reports whether e looks like an error value, and names it.
func errorArg(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.Ident:
		l := strings.ToLower(x.Name)
		return x.Name, strings.HasSuffix(l, "err") && x.Name != "stderr"
	case *ast.SelectorExpr:
		l := strings.ToLower(x.Sel.Name)
		return x.Sel.Name, strings.HasSuffix(l, "err") && x.Sel.Name != "Stderr"
	case *ast.CallExpr:
		if s, ok := x.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Err" && len(x.Args) == 0 {
			if id, ok := s.X.(*ast.Ident); ok {
				return id.Name + ".Err()", true
			}
			return "Err()", true
		}
	}
	return "", false
}

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

// TestNoPrintsOutsideCommands fails on any fmt.Print, fmt.Printf,
// fmt.Println, print or println call in the module's non-test code outside
// cmd/: a service's logs go through zerolog (internal/obs), where they have a
// level, a component and a destination the operator chose; a stray print
// writes to stdout on every call, as a forgotten debug line did in the
// sink's lag poll. Commands (cmd/) print what their users asked for.
func TestNoPrintsOutsideCommands(t *testing.T) {
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
			if rel == "cmd" || base == "testdata" || base == "node_modules" || (strings.HasPrefix(base, ".") && rel != ".") {
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
		calls, err := printCalls(rel, src)
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
		t.Errorf("%s: print to stdout outside cmd/; log through zerolog instead (internal/obs)", f)
	}
}

// TestPrintCallsFindsEveryForm keeps the check above honest: every form it
// must catch is caught, including an aliased fmt, and the forms it must
// leave alone (Fprint to a writer, Sprint, a method named Println) are left.
func TestPrintCallsFindsEveryForm(t *testing.T) {
	t.Parallel()
	src := `package p
import (
	"fmt"
	f2 "fmt"
	"io"
)
type l struct{}
func (l) Println(...any) {}
func g(w io.Writer) {
	fmt.Println("a")
	fmt.Printf("%d", 1)
	f2.Print("b")
	println("c")
	print("d")
	fmt.Fprintln(w, "ok")
	_ = fmt.Sprint("ok")
	var x l
	x.Println("ok")
}
`
	got, err := printCalls("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go:10 fmt.Println", "p.go:11 fmt.Printf", "p.go:12 f2.Print", "p.go:13 println", "p.go:14 print"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("printCalls found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// printCalls returns "file:line call" for each print to stdout in src.
func printCalls(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	fmtNames := map[string]bool{}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "fmt" {
			if imp.Name != nil {
				fmtNames[imp.Name.Name] = true
			} else {
				fmtNames["fmt"] = true
			}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			if fn.Name == "print" || fn.Name == "println" {
				out = append(out, name+":"+strconv.Itoa(fset.Position(call.Pos()).Line)+" "+fn.Name)
			}
		case *ast.SelectorExpr:
			pkg, ok := fn.X.(*ast.Ident)
			if ok && fmtNames[pkg.Name] && (fn.Sel.Name == "Print" || fn.Sel.Name == "Printf" || fn.Sel.Name == "Println") {
				out = append(out, name+":"+strconv.Itoa(fset.Position(call.Pos()).Line)+" "+pkg.Name+"."+fn.Sel.Name)
			}
		}
		return true
	})
	return out, nil
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

package backend

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// These tests run everywhere (no GPU needed): they catch drift between the Go
// launcher's parameter lists (cudaKernels), the embedded PTX, and the .cu
// source the PTX is generated from.

var (
	ptxEntryRE = regexp.MustCompile(`(?s)\.entry\s+([A-Za-z_][A-Za-z0-9_$]*)\s*\((.*?)\)`)
	ptxParamRE = regexp.MustCompile(`\.param\s+\.(u64|b64|s64|u32|s32|b32|f32)\b`)
	cuKernelRE = regexp.MustCompile(`(?s)extern\s+"C"\s+__global__\s+void\s+([A-Za-z_][A-Za-z0-9_]*)\s*\((.*?)\)\s*\{`)
)

// ptxEntries parses the .entry declarations of a PTX module into parameter
// kinds; a parameter of any other type is reported as kind 255.
func ptxEntries(t *testing.T, ptx string) map[string][]kparam {
	t.Helper()
	out := map[string][]kparam{}
	for _, m := range ptxEntryRE.FindAllStringSubmatch(ptx, -1) {
		var kinds []kparam
		for _, decl := range strings.Split(m[2], ",") {
			if strings.TrimSpace(decl) == "" {
				continue
			}
			p := ptxParamRE.FindStringSubmatch(decl)
			switch {
			case p == nil:
				kinds = append(kinds, 255)
			case p[1] == "f32":
				kinds = append(kinds, kFloat)
			case strings.HasSuffix(p[1], "64"):
				kinds = append(kinds, kPtr)
			default:
				kinds = append(kinds, kInt)
			}
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("PTX declares .entry %s twice", m[1])
		}
		out[m[1]] = kinds
	}
	return out
}

func sameKinds(a, b []kparam) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPTXEntriesMatchLauncher checks that every kernel the Go launcher
// resolves is an .entry of the embedded PTX with exactly the parameters the
// launcher passes, and that the module header is what the driver JIT needs.
func TestPTXEntriesMatchLauncher(t *testing.T) {
	t.Parallel()
	for _, want := range []string{".version ", ".target sm_", ".address_size 64"} {
		if !strings.Contains(kernelPTX, want) {
			t.Errorf("embedded PTX lacks %q", want)
		}
	}
	if o, c := strings.Count(kernelPTX, "{"), strings.Count(kernelPTX, "}"); o != c {
		t.Errorf("embedded PTX has %d '{' and %d '}'", o, c)
	}
	entries := ptxEntries(t, kernelPTX)
	if len(entries) != len(cudaKernels) {
		t.Errorf("PTX has %d entries, the launcher knows %d", len(entries), len(cudaKernels))
	}
	for _, k := range cudaKernels {
		got, ok := entries[k.name]
		if !ok {
			t.Errorf("PTX has no .entry %s", k.name)
			continue
		}
		if !sameKinds(got, k.params) {
			t.Errorf(".entry %s parameters %v, launcher passes %v (0 ptr, 1 int, 2 float)", k.name, got, k.params)
		}
	}
}

// TestCUSourceMatchesLauncher checks the .cu source declares the same
// kernels with the same parameter kinds, so editing kernels.cu without
// running gen.sh (or without updating cudaKernels) fails here.
func TestCUSourceMatchesLauncher(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("kernels/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string][]kparam{}
	for _, m := range cuKernelRE.FindAllStringSubmatch(string(src), -1) {
		var kinds []kparam
		for _, decl := range strings.Split(m[2], ",") {
			decl = strings.TrimSpace(decl)
			switch {
			case strings.Contains(decl, "*"):
				kinds = append(kinds, kPtr)
			case strings.HasPrefix(decl, "int "):
				kinds = append(kinds, kInt)
			case strings.HasPrefix(decl, "float "):
				kinds = append(kinds, kFloat)
			default:
				t.Errorf("kernel %s: unexpected parameter %q", m[1], decl)
			}
		}
		found[m[1]] = kinds
	}
	if len(found) != len(cudaKernels) {
		t.Errorf("kernels.cu declares %d kernels, the launcher knows %d", len(found), len(cudaKernels))
	}
	for _, k := range cudaKernels {
		if got, ok := found[k.name]; !ok || !sameKinds(got, k.params) {
			t.Errorf("kernels.cu %s(%v), launcher passes %v", k.name, got, k.params)
		}
	}
}

// TestLaunchChecksArguments checks the launcher's own guard against passing a
// kernel the wrong arguments (it records ErrCUDAArg instead of launching).
func TestLaunchChecksArguments(t *testing.T) {
	t.Parallel()
	c := &cudaBackend{}
	c.launch(kFill, 10, aPtr(0), aInt(10)) // one argument short
	if c.err == nil || !strings.Contains(c.err.Error(), "fill takes 3 arguments, 2 passed") {
		t.Fatalf("err = %v", c.err)
	}
	c = &cudaBackend{}
	c.launch(kFill, 10, aPtr(0), aFloat(1), aInt(10)) // kinds swapped
	if c.err == nil || !strings.Contains(c.err.Error(), "wrong kind") {
		t.Fatalf("err = %v", c.err)
	}
}

package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildBinary builds the harnessflow command into dir and returns its path:
// tests use it to run components as real child processes. It needs the go
// toolchain and runs from the module that holds this package.
func BuildBinary(ctx context.Context, dir string) (string, error) {
	var out bytes.Buffer
	gomod := exec.CommandContext(ctx, "go", "env", "GOMOD")
	gomod.Stdout = &out
	if err := gomod.Run(); err != nil {
		return "", fmt.Errorf("fleet: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(out.String()))
	bin := filepath.Join(dir, "harnessflow")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/harnessflow")
	build.Dir = root
	var stderr bytes.Buffer
	build.Stderr = &stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("fleet: go build ./cmd/harnessflow: %w\n%s", err, stderr.String())
	}
	return bin, nil
}

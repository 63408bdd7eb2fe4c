package secret_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harnessflow/harnessflow/internal/secret"
)

// TestFirstLine: a secret file readable by others is refused with the chmod
// to run; the first line is the secret, without a BOM, its CRLF or spaces;
// an empty file is refused.
func TestFirstLine(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(p, []byte("\ufeff s3cret \r\nignored\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secret.FirstLine(p, "password file"); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) ||
		!strings.Contains(err.Error(), "password file") {
		t.Fatalf("mode 644: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := secret.FirstLine(p, "password file"); err != nil || pw != "s3cret" {
		t.Fatalf("mode 600: %q %v", pw, err)
	}
	if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := secret.FirstLine(p, "password file"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := secret.ReadFile(filepath.Join(t.TempDir(), "none"), "password file"); err == nil {
		t.Fatal("a missing file was read")
	}
}

package testenv

import (
	"os"
	"testing"
)

// Missing stops a test that lacks a part it needs (a tool, a file system
// feature): under CI=true it fails, since CI installs every part and a skip
// there would hide a test that never ran; elsewhere it skips. why says what
// is missing and how to get it.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing part fails the test)", why)
	}
	t.Skip(why)
}

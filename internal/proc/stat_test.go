package proc

import "testing"

func TestStatFields(t *testing.T) {
	t.Parallel()
	line := []byte("4242 (my) (odd prog) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 30 10 3\n")
	f, err := StatFields(line, 17)
	if err != nil {
		t.Fatal(err)
	}
	// Field 3 is the state, 14 and 15 utime and stime, 19 the nice value.
	if f[0] != "S" || f[14-3] != "5" || f[15-3] != "3" || f[19-3] != "10" {
		t.Fatalf("fields %q", f)
	}
	if _, err := StatFields(line, 30); err == nil {
		t.Error("a short line was accepted")
	}
	if _, err := StatFields([]byte("4242 no name"), 1); err == nil {
		t.Error("a line without ')' was accepted")
	}
}

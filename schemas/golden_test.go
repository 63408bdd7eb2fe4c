package schemas

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the current version's golden files and fuzz seeds")

// currentGoldenDir returns the golden directory of the schema version
// Encode writes today for typ ("v1", "v2", ...). A version directory holds
// the golden files of the types whose schema that version changed.
func currentGoldenDir(typ Type) string { return fmt.Sprintf("v%d", infos[typ].current.version) }

// TestGolden is the compatibility guard: every committed golden file, of
// every schema version, must decode with the current code to its expected
// event, and the current version's file must be what Encode writes today.
// Golden files of old versions are never rewritten. v1 holds every type;
// a later directory only the types its schema version changed.
func TestGolden(t *testing.T) {
	t.Parallel()
	if *update {
		writeGoldens(t)
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "golden", "v*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden directories: %v", err)
	}
	for _, dir := range dirs {
		version := filepath.Base(dir)
		expected, ok := expectedByVersion[version]
		if !ok {
			t.Fatalf("%s: no expected events for golden version %s", dir, version)
		}
		want := expected()
		for _, typ := range AllTypes {
			if _, ok := want[typ]; !ok {
				continue
			}
			t.Run(version+"/"+string(typ), func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(dir, string(typ)+".bin"))
				if err != nil {
					t.Fatalf("golden file missing (run go test ./schemas -run Golden -update for the current version): %v", err)
				}
				ev, err := Decode(b)
				if err != nil {
					t.Fatalf("Decode golden: %v", err)
				}
				if !reflect.DeepEqual(ev, want[typ]) {
					t.Fatalf("golden decodes to\n%#v\nwant\n%#v", ev, want[typ])
				}
				if err := Validate(ev, DefaultLimits()); err != nil {
					t.Fatalf("golden event does not validate: %v", err)
				}
				if version == currentGoldenDir(typ) {
					enc, err := Encode(want[typ])
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(enc, b) {
						t.Fatalf("Encode of the fixture differs from the committed golden (schema or encoder changed without a new version):\n got %x\nwant %x", enc, b)
					}
				}
			})
		}
	}
	for _, typ := range AllTypes {
		if _, err := os.Stat(filepath.Join("testdata", "golden", currentGoldenDir(typ), string(typ)+".bin")); err != nil {
			t.Errorf("%s: no golden file of its current schema version (go test ./schemas -run Golden -update): %v", typ, err)
		}
	}
}

// TestFingerprintsRegistered checks that every committed .avsc and every
// golden file's fingerprint is known to Decode, so old versions stay
// decodable.
func TestFingerprintsRegistered(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("avro", "v*", "*.avsc"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files: %v", err)
	}
	if len(files) != len(Versions()) {
		t.Fatalf("%d .avsc files, %d registered versions", len(files), len(Versions()))
	}
	for _, v := range Versions() {
		if sv := byFingerprint[v.Fingerprint]; sv == nil || sv.info.typ != v.Type {
			t.Errorf("%s v%d: fingerprint %016x not registered", v.Type, v.Version, v.Fingerprint)
		}
	}
	for _, typ := range AllTypes {
		if Fingerprint(typ) == 0 || Schema(typ) == "" {
			t.Errorf("%s: no current schema", typ)
		}
	}
	goldens, _ := filepath.Glob(filepath.Join("testdata", "golden", "v*", "*.bin"))
	if len(goldens) < len(AllTypes) {
		t.Fatalf("only %d golden files", len(goldens))
	}
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil || len(b) < 10 {
			t.Fatalf("%s: %v", g, err)
		}
		if byFingerprint[binary.LittleEndian.Uint64(b[2:10])] == nil {
			t.Errorf("%s: fingerprint not registered", g)
		}
	}
}

func writeGoldens(t *testing.T) {
	for _, typ := range AllTypes {
		dir := filepath.Join("testdata", "golden", currentGoldenDir(typ))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		fx := expectedByVersion[currentGoldenDir(typ)]()
		b, err := Encode(fx[typ])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, string(typ)+".bin"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := MarshalJSON(fx[typ])
		if err != nil {
			t.Fatal(err)
		}
		writeSeed(t, "FuzzDecode", "golden-"+string(typ), b)
		writeSeed(t, "FuzzParseJSON", "golden-"+string(typ), j)
		writeSeed(t, "FuzzDecodeConfluent", "golden-"+string(typ), append([]byte{0, 0, 0, 0, byte(1 + typeIndex(typ))}, b[10:]...))
	}
	for name, b := range map[string][]byte{
		"empty": {}, "magic-only": {0xC3, 0x01}, "unknown-fp": {0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0},
		"huge-length": append(append([]byte{0xC3, 0x01}, leFP(TypeTaskAttempt)...), 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	} {
		writeSeed(t, "FuzzDecode", name, b)
	}
	for name, s := range map[string]string{
		"unknown-type": `{"type":"nope"}`, "not-object": `[1,2]`,
		"bad-int": `{"type":"cell_finished","cell_id":"c","status":"completed","attempts":1.5}`,
		"minimal": `{"type":"cell_finished","cell_id":"c","status":"failed"}`,
		"escapes": `{"type":"skill_event","cell_id":"c\u0000\n\"","task_id":"t","attempt":1,"turn":0,"tool":"list_skills","status":"loaded","event_time":1700000000123}`,
	} {
		writeSeed(t, "FuzzParseJSON", name, []byte(s))
	}
}

func leFP(t Type) []byte { return binary.LittleEndian.AppendUint64(nil, Fingerprint(t)) }

func typeIndex(t Type) int {
	for i, x := range AllTypes {
		if x == t {
			return i
		}
	}
	return -1
}

// writeSeed writes one file of Go's fuzz corpus format.
func writeSeed(t *testing.T, fuzz, name string, b []byte) {
	dir := filepath.Join("testdata", "fuzz", fuzz)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

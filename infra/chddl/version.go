package chddl

import (
	"strconv"
	"strings"
)

// Version is a ClickHouse server version.
type Version struct {
	Major, Minor, Patch int
	// Raw is the server's own string, e.g. "18.16.1" or "24.8.4.13".
	Raw string
}

// String returns Raw.
func (v Version) String() string { return v.Raw }

// ParseVersion parses "major.minor.patch[...]"; missing parts are 0.
func ParseVersion(raw string) Version {
	v := Version{Raw: raw}
	parts := strings.SplitN(raw, ".", 4)
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		if i >= len(nums) {
			break
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			break
		}
		*nums[i] = n
	}
	return v
}

// QuoteIdent quotes a database or table name for SQL: backquotes, with
// backquotes and backslashes escaped.
func QuoteIdent(name string) string {
	r := strings.NewReplacer("\\", "\\\\", "`", "\\`")
	return "`" + r.Replace(name) + "`"
}

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

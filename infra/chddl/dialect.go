package chddl

import (
	"fmt"
	"strings"
)

// Dialect is the form of the DDL that a range of ClickHouse versions takes.
// The views mean the same in every dialect; only how a view is replaced
// differs.
type Dialect int

const (
	// Current replaces a view atomically with CREATE OR REPLACE VIEW:
	// ClickHouse 21.8 and later (tested on 26.7 through chDB). Analysts'
	// queries never see a view missing while migrations run.
	Current Dialect = iota
	// Legacy drops a view and creates it again (DROP TABLE IF EXISTS, then
	// CREATE VIEW IF NOT EXISTS): servers before 21.8, which lack CREATE OR
	// REPLACE VIEW (tested on 18.16). A query that reads the view between
	// the two statements fails.
	Legacy
)

// CurrentSince is the oldest server version given the Current dialect. 21.8
// is the oldest long-term-support release known to take CREATE OR REPLACE
// VIEW; older servers get Legacy, which every version takes.
var CurrentSince = Version{Major: 21, Minor: 8, Raw: "21.8"}

// NewestTested is the newest ClickHouse version the migrations are tested on
// (chDB in the test suite); `migrate --print` assumes it by default.
const NewestTested = "26.7"

// DialectFor returns the dialect for a server of version v.
func DialectFor(v Version) Dialect {
	if v.AtLeast(CurrentSince.Major, CurrentSince.Minor) {
		return Current
	}
	return Legacy
}

// String names the dialect as logs and `migrate --print` show it.
func (d Dialect) String() string {
	switch d {
	case Current:
		return "current"
	case Legacy:
		return "legacy"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DialectForVersion parses a server version ("18.16", "26.7.2.1") and
// returns its dialect; a version that does not start with a number is an
// error.
func DialectForVersion(raw string) (Dialect, error) {
	v := ParseVersion(strings.TrimSpace(raw))
	if v.Major == 0 {
		return 0, fmt.Errorf("%w: %q (want MAJOR.MINOR, e.g. %s or 18.16)", ErrBadVersion, raw, NewestTested)
	}
	return DialectFor(v), nil
}

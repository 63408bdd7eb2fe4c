// Package chddl holds harnessflow's ClickHouse schema: the numbered .sql
// migrations of this directory, embedded in the binary, and Migrate, which
// applies them with a schema_migrations ledger.
//
// Every statement is idempotent (CREATE ... IF NOT EXISTS; views are dropped
// and re-created), so an interrupted migration is finished by running it again:
// there is no "dirty" state. A file is recorded in the ledger, with its
// checksum, only after all its statements succeeded; a file whose checksum
// differs from the ledger's (an edited view) is applied again, and so is every
// file after it.
package chddl

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/harnessflow/harnessflow/internal/chx"
)

//go:embed *.sql
var sqlFS embed.FS

// DefaultDatabase is the database harnessflow uses unless told otherwise.
const DefaultDatabase = "harnessflow"

// DBPlaceholder is replaced by the quoted database name in every statement.
const DBPlaceholder = "{db}"

// File is one migration.
type File struct {
	// Version is the file's number (0001_tables.sql -> 1).
	Version uint32
	// Name is the file name.
	Name string
	// SQL is the file's text, with DBPlaceholder unsubstituted.
	SQL string
	// Checksum is the hex SHA-256 of SQL.
	Checksum string
}

// Files returns the embedded migrations in version order.
func Files() []File {
	entries, err := fs.Glob(sqlFS, "*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	var out []File
	for _, name := range entries {
		b, err := sqlFS.ReadFile(name)
		if err != nil {
			panic(err) // embedded
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseUint(num, 10, 32)
		if !ok || err != nil {
			panic(fmt.Sprintf("chddl: migration %q is not named NNNN_name.sql", name))
		}
		sum := sha256.Sum256(b)
		out = append(out, File{Version: uint32(v), Name: name, SQL: string(b), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// Statements splits f into statements for database: full-line `--` comments
// are dropped, a statement ends at a line ending in ';', and DBPlaceholder is
// replaced by the quoted database name.
func (f File) Statements(database string) []string {
	q := chx.QuoteIdent(database)
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(f.SQL, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, strings.ReplaceAll(s, DBPlaceholder, q))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, strings.ReplaceAll(s, DBPlaceholder, q))
	}
	return out
}

// Record is one ledger row.
type Record struct {
	Version   uint32
	Name      string
	Checksum  string
	AppliedAt time.Time
}

const ledgerDDL = `CREATE TABLE IF NOT EXISTS %s.schema_migrations (
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime
) ENGINE = ReplacingMergeTree(applied_at) ORDER BY version`

// Migrate creates database when missing and applies every migration that the
// ledger does not record with the file's current checksum. conn may have any
// default database: statements name database explicitly. It is safe to run
// concurrently with itself and to re-run after an interruption.
func Migrate(ctx context.Context, conn driver.Conn, database string) error {
	if strings.TrimSpace(database) == "" {
		return ErrNoDatabase
	}
	q := chx.QuoteIdent(database)
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+q); err != nil {
		return fmt.Errorf("create database %s: %w", database, err)
	}
	if err := conn.Exec(ctx, fmt.Sprintf(ledgerDDL, q)); err != nil {
		return fmt.Errorf("create ledger in %s: %w", database, err)
	}
	done, err := Applied(ctx, conn, database)
	if err != nil {
		return err
	}
	have := map[uint32]string{}
	last := map[uint32]time.Time{}
	for _, r := range done {
		have[r.Version] = r.Checksum
		last[r.Version] = r.AppliedAt
	}
	reapply := false
	for _, f := range Files() {
		// Once a file is (re-)applied, every later one is too: a later file may
		// redefine what an earlier one defined (0003 redefines v_cell_scores).
		if !reapply && have[f.Version] == f.Checksum {
			continue
		}
		reapply = true
		for i, stmt := range f.Statements(database) {
			if err := conn.Exec(ctx, stmt); err != nil {
				return &StatementError{File: f.Name, Index: i + 1, SQL: stmt, Err: err}
			}
		}
		if err := record(ctx, conn, q, f, last[f.Version]); err != nil {
			return fmt.Errorf("record migration %s: %w", f.Name, err)
		}
	}
	return nil
}

// record adds f to the ledger, stamped after prev (the version's latest
// record, zero when none) so that it is the latest even when the clock is
// behind it or within the same second: the ledger is read by argMax on
// applied_at. It uses a native batch insert with named columns: 18.16 does
// not take inline VALUES through clickhouse-go's Exec.
func record(ctx context.Context, conn driver.Conn, q string, f File, prev time.Time) error {
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+q+".schema_migrations (version, name, checksum, applied_at)")
	if err != nil {
		return err
	}
	defer b.Abort()
	at := time.Now().UTC().Truncate(time.Second)
	if !prev.IsZero() && !at.After(prev) {
		at = prev.UTC().Add(time.Second)
	}
	if err := b.Append(f.Version, f.Name, f.Checksum, at); err != nil {
		return err
	}
	return b.Send()
}

// Applied returns the ledger: the latest record per version, in version order.
func Applied(ctx context.Context, conn driver.Conn, database string) ([]Record, error) {
	q := chx.QuoteIdent(database)
	rows, err := conn.Query(ctx, "SELECT version, argMax(name, applied_at), argMax(checksum, applied_at), max(applied_at) FROM "+
		q+".schema_migrations GROUP BY version ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", database, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var r Record
		if err := rows.Scan(&r.Version, &r.Name, &r.Checksum, &r.AppliedAt); err != nil {
			return nil, fmt.Errorf("read ledger of %s: %w", database, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", database, err)
	}
	return out, nil
}

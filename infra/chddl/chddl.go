// Package chddl holds harnessflow's ClickHouse schema: the numbered .sql
// migrations of this directory, embedded in the binary, and Migrate, which
// applies them with a schema_migrations ledger.
//
// Every statement is idempotent (CREATE ... IF NOT EXISTS; views are CREATE
// OR REPLACE VIEW, or dropped and re-created on servers without it: see
// Dialect), so an interrupted migration is finished by running it again:
// there is no "dirty" state. A file is recorded in the ledger, with its
// checksum, only after all its statements succeeded; a file whose checksum
// differs from the ledger's is applied again, and so is every file after it.
// A released file is never edited: a change to the schema is a new file, so
// that a binary older than the ledger (a rolling upgrade) recognises it and
// leaves the schema alone.
//
// After migration 0009's statements, Migrate recomputes every cell's
// cell_scores summary under its rules before recording it (backfill in
// cellscores.go): data, not schema, so Print leaves it out (a schema
// applied by hand has cells computed live by v_cell_scores, with the same
// figures, until the sink next recomputes them).
//
// Migrations 0004 and 0007 change sort keys, which ClickHouse cannot alter:
// before each runs, Migrate rebuilds the tables of an older database that
// it re-keys by copy (rekey.go says how an old table is detected, what is
// done, and what the operator does).
package chddl

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
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
	// SQL is the file's text with its fragments expanded (see Fragments)
	// and DBPlaceholder unsubstituted.
	SQL string
	// Checksum is the hex SHA-256 of SQL: a change to a fragment changes
	// the checksum of every file that uses it.
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
		text, err := expandFragments(string(b))
		if err != nil {
			panic(fmt.Sprintf("chddl: migration %s: %v", name, err)) // embedded; TestFilesExpand covers it
		}
		sum := sha256.Sum256([]byte(text))
		out = append(out, File{Version: uint32(v), Name: name, SQL: text, Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// Statements splits f into statements for database in dialect d: full-line
// `--` comments are dropped, a statement ends at a line ending in ';', and
// DBPlaceholder is replaced by the quoted database name. In the Legacy
// dialect each CREATE OR REPLACE VIEW becomes DROP TABLE IF EXISTS and
// CREATE VIEW IF NOT EXISTS (two statements, not atomic).
func (f File) Statements(database string, d Dialect) []string {
	q := QuoteIdent(database)
	var out []string
	emit := func(s string) {
		s = strings.ReplaceAll(s, DBPlaceholder, q)
		if d == Legacy && strings.HasPrefix(s, createOrReplaceView) {
			// The view's name is the quoted database, a dot and a word: a
			// database name may hold spaces.
			rest := strings.TrimPrefix(s, createOrReplaceView)
			name := viewNameRE.FindString(rest)
			if name == "" {
				name, _, _ = strings.Cut(rest, " ")
			}
			out = append(out, "DROP TABLE IF EXISTS "+name, "CREATE VIEW IF NOT EXISTS "+rest)
			return
		}
		out = append(out, s)
	}
	var cur strings.Builder
	for _, line := range strings.Split(f.SQL, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			emit(strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		emit(s)
	}
	return out
}

const createOrReplaceView = "CREATE OR REPLACE VIEW "

var viewNameRE = regexp.MustCompile("^" + quotedName + `\.\w+`)

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

// Session is what migrations need of a ClickHouse connection: a statement,
// and a query whose answer is read as text. chx.Session adapts a
// clickhouse-go connection; tests pass a chDB session.
type Session interface {
	Exec(ctx context.Context, query string) error
	QueryStrings(ctx context.Context, query string) ([]string, [][]string, error)
}

// Result says what Migrate found and did.
type Result struct {
	// ServerVersion is the server's `SELECT version()`.
	ServerVersion Version
	// Dialect is the form of the DDL chosen for ServerVersion.
	Dialect Dialect
	// Applied names the files applied by this run, in order; empty when the
	// schema was up to date.
	Applied []string
	// Newer lists ledger rows of migrations this binary does not have: a
	// newer harnessflow migrated the database, and Migrate left the schema
	// alone (a rolling upgrade's old binary must not undo the new schema).
	Newer []Record
}

// Migrate creates database when missing and applies every migration that the
// ledger does not record with the file's current checksum, in the dialect of
// the server's version. s may have any default database: statements name
// database explicitly. It is safe to run concurrently with itself and to
// re-run after an interruption. When the ledger records a migration newer
// than every file of this binary, it changes nothing and says so in
// Result.Newer.
func Migrate(ctx context.Context, s Session, database string) (Result, error) {
	return migrate(ctx, s, database, "")
}

// MigrateCluster is Migrate on the ClickHouse cluster named cluster (its
// remote_servers name), through any one of its nodes: ON CLUSTER DDL,
// replicated local tables, Distributed tables and views with the contract's
// names on every node, a ledger replicated to every node (cluster.go). Run
// again from any node, it finds nothing to do.
func MigrateCluster(ctx context.Context, s Session, database, cluster string) (Result, error) {
	if err := checkCluster(cluster); err != nil {
		return Result{}, err
	}
	return migrate(ctx, s, database, cluster)
}

func migrate(ctx context.Context, s Session, database, cluster string) (Result, error) {
	var res Result
	if strings.TrimSpace(database) == "" {
		return res, ErrNoDatabase
	}
	v, err := serverVersion(ctx, s)
	if err != nil {
		return res, err
	}
	res.ServerVersion, res.Dialect = v, DialectFor(v)
	q := QuoteIdent(database)
	createDB, ledger := "CREATE DATABASE IF NOT EXISTS "+q, fmt.Sprintf(ledgerDDL, q)
	if cluster != "" {
		createDB, ledger = createDB+" ON CLUSTER "+cluster, clusterLedger(database, cluster)
	}
	if err := s.Exec(ctx, createDB); err != nil {
		return res, fmt.Errorf("create database %s: %w", database, err)
	}
	if err := s.Exec(ctx, ledger); err != nil {
		return res, fmt.Errorf("create ledger in %s: %w", database, err)
	}
	done, err := Applied(ctx, s, database)
	if err != nil {
		return res, err
	}
	files := Files()
	newest := files[len(files)-1].Version
	have := map[uint32]string{}
	last := map[uint32]time.Time{}
	for _, r := range done {
		if r.Version > newest {
			res.Newer = append(res.Newer, r)
		}
		have[r.Version] = r.Checksum
		last[r.Version] = r.AppliedAt
	}
	if len(res.Newer) > 0 {
		return res, nil
	}
	reapply := false
	for _, f := range files {
		// Once a file is (re-)applied, every later one is too: a later file may
		// redefine what an earlier one defined (0003 redefines v_cell_scores).
		if !reapply && have[f.Version] == f.Checksum {
			continue
		}
		reapply = true
		if cluster == "" {
			if err := rekey(ctx, s, database, f.Version); err != nil {
				return res, err
			}
		}
		if err := addColumns(ctx, s, database, cluster, f.Version); err != nil {
			return res, err
		}
		stmts, err := fileStatements(f, database, cluster, res.Dialect)
		if err != nil {
			return res, err
		}
		for i, stmt := range stmts {
			if err := s.Exec(ctx, stmt); err != nil {
				return res, &StatementError{File: f.Name, Index: i + 1, SQL: stmt, Err: err}
			}
		}
		if err := backfill(ctx, s, database, f.Version); err != nil {
			return res, fmt.Errorf("migration %s: %w", f.Name, err)
		}
		if err := s.Exec(ctx, recordSQL(q, f, stamp(last[f.Version]))); err != nil {
			return res, fmt.Errorf("record migration %s: %w", f.Name, err)
		}
		res.Applied = append(res.Applied, f.Name)
	}
	return res, nil
}

// Print writes every statement that Migrate applies to an empty database, in
// dialect d, each ending with ';' at the end of a line: the database, the
// ledger, every migration and its ledger record. The tables that migrations
// 0004 and 0007 rebuild (rekey.go) are printed with their final definitions
// where earlier files create them, as Migrate leaves them. Applied by hand (or by other
// tooling), it leaves the database as Migrate would, and a later Migrate finds
// nothing to do.
func Print(w io.Writer, database string, d Dialect) error {
	return printSchema(w, database, "", d)
}

// PrintCluster is Print for MigrateCluster: the statements it applies to a
// cluster with no harnessflow database yet.
func PrintCluster(w io.Writer, database, cluster string, d Dialect) error {
	if err := checkCluster(cluster); err != nil {
		return err
	}
	return printSchema(w, database, cluster, d)
}

func printSchema(w io.Writer, database, cluster string, d Dialect) error {
	if strings.TrimSpace(database) == "" {
		return ErrNoDatabase
	}
	q := QuoteIdent(database)
	bw := bufio.NewWriter(w)
	createDB, ledger := "CREATE DATABASE IF NOT EXISTS "+q, fmt.Sprintf(ledgerDDL, q)
	if cluster != "" {
		createDB, ledger = createDB+" ON CLUSTER "+cluster, clusterLedger(database, cluster)
		fmt.Fprintf(bw, "-- harnessflow schema for database %s on cluster %s, dialect %s (chddl.PrintCluster)\n", database, cluster, d)
	} else {
		fmt.Fprintf(bw, "-- harnessflow schema for database %s, dialect %s (chddl.Print)\n", database, d)
	}
	fmt.Fprintf(bw, "%s;\n\n%s;\n", createDB, ledger)
	for _, f := range Files() {
		fmt.Fprintf(bw, "\n-- %s (sha256 %s)\n", f.Name, f.Checksum)
		stmts, err := printedStatements(f, database, cluster, d)
		if err != nil {
			return err
		}
		for _, stmt := range stmts {
			fmt.Fprintf(bw, "%s;\n\n", stmt)
		}
		fmt.Fprintf(bw, "%s;\n", recordSQL(q, f, "now()"))
	}
	return bw.Flush()
}

// fileStatements are the statements Migrate applies for f: as written on
// a single server; on a cluster, in their final form (printedStatements: no
// rebuild runs there) turned into their cluster form.
func fileStatements(f File, database, cluster string, d Dialect) ([]string, error) {
	if cluster == "" {
		return f.Statements(database, d), nil
	}
	return printedStatements(f, database, cluster, d)
}

// printedStatements are f's statements as Print writes them: tables with
// their final definitions (printedStatement), in cluster form when cluster
// is set.
func printedStatements(f File, database, cluster string, d Dialect) ([]string, error) {
	var out []string
	for _, stmt := range f.Statements(database, d) {
		stmt = printedStatement(f, stmt, database, d)
		if cluster == "" {
			out = append(out, stmt)
			continue
		}
		cs, err := clusterStatements(stmt, database, cluster)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

// recordSQL adds f to the ledger of database q, stamped at, a SQL DateTime
// expression. INSERT ... SELECT, because 18.16 does not take inline VALUES
// through clickhouse-go's Exec.
func recordSQL(q string, f File, at string) string {
	return fmt.Sprintf("INSERT INTO %s.schema_migrations (version, name, checksum, applied_at) SELECT toUInt32(%d), %s, %s, %s",
		q, f.Version, QuoteString(f.Name), QuoteString(f.Checksum), at)
}

// stamp is the ledger time of a new record of a version whose latest record
// is prev (zero when none): now, or a second after prev when the clock is
// behind it or within the same second, so that the new record is the latest
// (the ledger is read by argMax on applied_at).
func stamp(prev time.Time) string {
	at := time.Now().UTC().Truncate(time.Second)
	if !prev.IsZero() && !at.After(prev) {
		at = prev.UTC().Add(time.Second)
	}
	return fmt.Sprintf("toDateTime(%d)", at.Unix())
}

func serverVersion(ctx context.Context, s Session) (Version, error) {
	_, rows, err := s.QueryStrings(ctx, "SELECT version()")
	if err != nil {
		return Version{}, fmt.Errorf("server version: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return Version{}, fmt.Errorf("server version: %d rows", len(rows))
	}
	return ParseVersion(rows[0][0]), nil
}

// Applied returns the ledger: the latest record per version, in version order.
func Applied(ctx context.Context, s Session, database string) ([]Record, error) {
	q := QuoteIdent(database)
	_, rows, err := s.QueryStrings(ctx, "SELECT toString(version), argMax(name, applied_at), argMax(checksum, applied_at), "+
		"toString(toUnixTimestamp(max(applied_at))) FROM "+q+".schema_migrations GROUP BY version ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", database, err)
	}
	out := make([]Record, 0, len(rows))
	for _, r := range rows {
		if len(r) != 4 {
			return nil, fmt.Errorf("read ledger of %s: %d columns", database, len(r))
		}
		v, err1 := strconv.ParseUint(r[0], 10, 32)
		at, err2 := strconv.ParseInt(r[3], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("read ledger of %s: %w", database, err)
		}
		out = append(out, Record{Version: uint32(v), Name: r[1], Checksum: r[2], AppliedAt: time.Unix(at, 0).UTC()})
	}
	return out, nil
}

// Log writes one line about r to l: which dialect was applied to which server
// version and what changed, or, when a newer binary migrated the database, a
// warning naming the migrations this binary does not have.
func (r Result) Log(l zerolog.Logger, database string) {
	if len(r.Newer) > 0 {
		names := make([]string, len(r.Newer))
		for i, n := range r.Newer {
			names[i] = fmt.Sprintf("%04d %s", n.Version, n.Name)
		}
		l.Warn().Str("database", database).Str("server_version", r.ServerVersion.Raw).Strs("newer_migrations", names).
			Msg("the schema was migrated by a newer harnessflow; leaving it alone (this binary is older than the database's ledger)")
		return
	}
	applied := r.Applied
	if applied == nil {
		applied = []string{}
	}
	l.Info().Str("database", database).Str("server_version", r.ServerVersion.Raw).Str("dialect", r.Dialect.String()).
		Strs("applied", applied).Msg("ClickHouse schema up to date")
}

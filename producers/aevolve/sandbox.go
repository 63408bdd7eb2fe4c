package aevolve

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A run directory is untrusted input (it may come from anyone's machine):
// every file of a cell is read through a cellFS, which confines opens to the
// cell directory with os.Root ("..", absolute paths and links out of the
// cell are refused by the kernel-level walk, not by string checks), reads
// only regular files that are neither a symbolic link nor hard-linked (a
// link's name in the cell says nothing of which file of the machine it is;
// a FIFO is opened non-blocking and refused, so the import never waits on
// a writer that does not come), and reads at most Config.MaxFileBytes of
// each. A cell directory that is a symbolic link is refused whole. A refused file is a RefusedError: the
// importer reports it, counts it in Summary.Refused and goes on.

// cellFS reads one cell directory.
type cellFS struct {
	root *os.Root
	dir  string // the cell directory, as found
	max  int64  // byte cap of one file
}

// openCell opens dir for reading. want is the directory as the scan found
// it: a cell directory that is not that directory any more (replaced by a
// symbolic link since the scan, say) is a *RefusedError; a link is never
// followed to open a cell.
func openCell(dir string, want fs.FileInfo, max int64) (*cellFS, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open cell directory %s: %w", shown(dir), err)
	}
	st, err := r.Stat(".")
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("stat cell directory %s: %w", shown(dir), err)
	}
	if want == nil || !os.SameFile(st, want) {
		r.Close()
		return nil, &RefusedError{Path: ".", Reason: "is not the directory the scan found (replaced by a symbolic link while the run was read?): not followed, none of its tasks imported"}
	}
	return &cellFS{root: r, dir: dir, max: max}, nil
}

func (c *cellFS) close() error { return c.root.Close() }

// path is rel as a path on disk, for reports.
func (c *cellFS) path(rel string) string { return filepath.Join(c.dir, rel) }

// openRegular opens rel, a regular file inside the cell, and returns it
// with its size. A missing file is an fs.ErrNotExist error; a symbolic
// link (even to a file of the cell), a file with more than one hard link
// (it may be any file of the machine: the link's name in the cell says
// nothing of where it came from), a path out of the cell, a device, a FIFO
// or a socket is a *RefusedError.
func (c *cellFS) openRegular(rel string) (*os.File, int64, error) {
	if !filepath.IsLocal(rel) {
		return nil, 0, &RefusedError{Path: rel, Reason: "is not a path inside the cell directory"}
	}
	lst, err := c.root.Lstat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, err
		}
		return nil, 0, &RefusedError{Path: rel, Reason: "cannot be opened inside the cell directory (a link out of it?): " + err.Error()}
	}
	if lst.Mode()&fs.ModeSymlink != 0 {
		return nil, 0, &RefusedError{Path: rel, Reason: "is a symbolic link: not followed (copy the file it names into the cell to import it)"}
	}
	// O_NONBLOCK: opening a FIFO for reading returns at once instead of
	// waiting for a writer; it changes nothing for a regular file.
	f, err := c.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, err
		}
		return nil, 0, &RefusedError{Path: rel, Reason: "cannot be opened inside the cell directory (a link out of it?): " + err.Error()}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat %s: %w", shown(rel), err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, &RefusedError{Path: rel, Reason: fmt.Sprintf("is not a regular file (%s)", kindOf(st.Mode()))}
	}
	if !os.SameFile(lst, st) {
		f.Close()
		return nil, 0, &RefusedError{Path: rel, Reason: "changed while it was opened (replaced by a symbolic link?): not read"}
	}
	if n := hardLinks(st); n > 1 {
		f.Close()
		return nil, 0, &RefusedError{Path: rel, Reason: fmt.Sprintf("has %d hard links: not read (a hard link may be any file of the machine; copy the file into the cell to import it)", n)}
	}
	return f, st.Size(), nil
}

// hardLinks is the link count of st (1 where the system does not say).
func hardLinks(st fs.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Nlink)
	}
	return 1
}

// kindOf names a non-regular file mode.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

// open opens rel for reading, refusing it when it is over the byte cap;
// should the file grow while it is read, reading past the cap fails with
// a *RefusedError instead of returning a truncated file.
func (c *cellFS) open(rel string) (io.ReadCloser, error) {
	f, size, err := c.openRegular(rel)
	if err != nil {
		return nil, err
	}
	if size > c.max {
		f.Close()
		return nil, c.overCap(rel, size)
	}
	return &capReader{f: f, left: c.max, over: func() error { return c.overCap(rel, c.max+1) }}, nil
}

func (c *cellFS) overCap(rel string, size int64) error {
	return &RefusedError{Path: rel, Reason: fmt.Sprintf("is %d bytes, over the %d-byte cap of one file (raise Config.MaxFileBytes to import it)", size, c.max)}
}

// capReader reads f up to left bytes and fails with over() past them.
type capReader struct {
	f    *os.File
	left int64
	over func() error
}

func (r *capReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		var one [1]byte
		if n, _ := r.f.Read(one[:]); n > 0 {
			return 0, r.over()
		}
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.f.Read(p)
	r.left -= int64(n)
	return n, err
}

func (r *capReader) Close() error { return r.f.Close() }

// readFile reads rel whole (at most the byte cap).
func (c *cellFS) readFile(rel string) ([]byte, error) {
	f, err := c.open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, fmt.Errorf("read %s: %w", shown(rel), err)
	}
	return data, nil
}

// readDir lists the directory rel inside the cell (nil when it is missing
// or not a directory inside the cell). Entries keep their own type: a link
// is reported as a link, not followed.
func (c *cellFS) readDir(rel string) []fs.DirEntry {
	if !filepath.IsLocal(rel) {
		return nil
	}
	d, err := c.root.Open(rel)
	if err != nil {
		return nil
	}
	defer d.Close()
	if st, err := d.Stat(); err != nil || !st.IsDir() {
		return nil
	}
	ents, _ := d.ReadDir(-1)
	return ents
}

// isRegular reports whether rel is a regular file inside the cell
// (following links that stay inside it).
func (c *cellFS) isRegular(rel string) bool {
	if !filepath.IsLocal(rel) {
		return false
	}
	st, err := c.root.Stat(rel)
	return err == nil && st.Mode().IsRegular()
}

// exists reports whether rel exists inside the cell, of any type.
func (c *cellFS) exists(rel string) bool {
	if !filepath.IsLocal(rel) {
		return false
	}
	_, err := c.root.Stat(rel)
	return err == nil
}

// refuse records that the file of f was refused (err a *RefusedError) or
// could not be read, and counts a refusal in the summary.
func (im *importer) refuse(f *FileReport, err error) {
	var re *RefusedError
	if errors.As(err, &re) {
		f.Refused = re.Reason
		// A file refused while reading another's (an object of the
		// workspace's git store) is named in the reason.
		if !strings.HasSuffix(filepath.ToSlash(f.Path), re.Path) {
			f.Refused = shown(re.Path) + " " + re.Reason
		}
		im.sum.Refused++
		return
	}
	f.skip("unreadable: " + err.Error())
}

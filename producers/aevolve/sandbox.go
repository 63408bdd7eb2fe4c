package aevolve

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A run directory is untrusted input (it may come from anyone's machine):
// every file of a cell is read through a cellFS, which confines opens to the
// cell directory with os.Root (a symbolic link may point within the cell,
// never out of it, and "..", absolute paths and links to /dev/zero are
// refused by the kernel-level walk, not by string checks), reads only
// regular files (a FIFO is opened non-blocking and refused, so the import
// never waits on a writer that does not come), and reads at most
// Config.MaxFileBytes of each. A refused file is a RefusedError: the
// importer reports it, counts it in Summary.Refused and goes on.

// cellFS reads one cell directory.
type cellFS struct {
	root *os.Root
	dir  string // the cell directory, as found
	max  int64  // byte cap of one file
}

// openCell opens dir for reading; a cell directory that is itself a link
// (cells gathered from several disks) is followed once, here.
func openCell(dir string, max int64) (*cellFS, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open cell directory %s: %w", dir, err)
	}
	return &cellFS{root: r, dir: dir, max: max}, nil
}

func (c *cellFS) close() error { return c.root.Close() }

// path is rel as a path on disk, for reports.
func (c *cellFS) path(rel string) string { return filepath.Join(c.dir, rel) }

// openRegular opens rel, a regular file inside the cell, and returns it
// with its size. A missing file is an fs.ErrNotExist error; a link out of
// the cell, a device, a FIFO or a socket is a *RefusedError.
func (c *cellFS) openRegular(rel string) (*os.File, int64, error) {
	if !filepath.IsLocal(rel) {
		return nil, 0, &RefusedError{Path: rel, Reason: "is not a path inside the cell directory"}
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
		return nil, 0, fmt.Errorf("stat %s: %w", rel, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, &RefusedError{Path: rel, Reason: fmt.Sprintf("is not a regular file (%s)", kindOf(st.Mode()))}
	}
	return f, st.Size(), nil
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
		return nil, fmt.Errorf("read %s: %w", rel, err)
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
		im.sum.Refused++
		return
	}
	f.skip("unreadable: " + err.Error())
}

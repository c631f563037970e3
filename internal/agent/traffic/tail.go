package traffic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// maxLine bounds one access log line; a longer one is skipped.
const maxLine = 256 << 10

// fileID identifies a file across renames: device and inode.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{Dev: uint64(st.Dev), Ino: st.Ino} //nolint:unconvert // Dev is uint32 on some platforms
}

// position is how far a file has been consumed.
type position struct {
	File fileID `json:"file"`
	// Offset is the byte after the last complete line consumed.
	Offset int64 `json:"offset"`
	// Head is the FNV-1a hash of the file's first line, once consumed; it
	// tells a file truncated and written again past Offset from the same
	// file grown. Zero: not known.
	Head uint64 `json:"head,omitempty"`
}

func hashLine(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64() | 1 // never zero
}

// follower reads the complete lines appended to a log file, across
// rotations (the file replaced: the old one is read to its end, the new
// one from its start) and truncations (read again from the start). A last
// line without its newline is not consumed until the newline comes. Not
// safe for concurrent use.
type follower struct {
	path string
	log  *slog.Logger

	f   *os.File // nil until the file exists
	pos position
	// resume is the position saved by a previous run, used when the file
	// is first opened.
	resume *position
	br     *bufio.Reader
	// skipping: inside a line longer than maxLine, skipped to its newline.
	skipping bool
	waiting  bool // the file's absence was logged
}

func newFollower(path string, log *slog.Logger) *follower {
	return &follower{path: path, log: log, br: bufio.NewReaderSize(nil, maxLine)}
}

// close closes the open file.
func (t *follower) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

// stop closes the open file, to be opened again at the same position.
func (t *follower) stop() {
	if t.f != nil {
		pos := t.pos
		t.resume = &pos
		t.close()
	}
}

// poll passes every complete line appended since the last poll to fn.
func (t *follower) poll(fn func([]byte)) error {
	pathInfo, statErr := os.Stat(t.path)
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return statErr
	}
	if t.f == nil {
		if statErr != nil {
			if !t.waiting {
				t.log.Info("proxy access log not found; waiting for it", "path", t.path)
				t.waiting = true
			}
			return nil
		}
		if err := t.open(fn); err != nil {
			return err
		}
		return t.read(fn)
	}
	if fi, err := t.f.Stat(); err == nil && fi.Size() < t.pos.Offset {
		t.log.Info("proxy access log truncated; reading it from the start", "path", t.path,
			"size", fi.Size(), "offset", t.pos.Offset)
		t.pos.Offset, t.pos.Head = 0, 0
	}
	if err := t.read(fn); err != nil {
		return err
	}
	if statErr == nil && idOf(pathInfo) != t.pos.File {
		// Replaced (renamed away, a new file in its place) before the
		// stat above; what was written to the old one was written before
		// that, and has just been read.
		t.finish(fn)
		t.log.Info("proxy access log rotated; reading the new file", "path", t.path)
		t.close()
		if err := t.open(fn); err != nil {
			return err
		}
		return t.read(fn)
	}
	return nil
}

// open opens the file at path: at the resumed position when it is the
// same file, else from its start (after finishing the resumed file, if it
// was renamed next to it, into fn).
func (t *follower) open(fn func([]byte)) error {
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	t.waiting = false
	t.f, t.pos, t.skipping = f, position{File: idOf(fi)}, false
	if r := t.resume; r != nil {
		t.resume = nil
		switch {
		case r.File != t.pos.File:
			t.finishRenamed(*r, fn)
		case t.matches(f, fi, *r):
			t.pos = *r
		default:
			t.log.Info("proxy access log was truncated while the agent was stopped; reading it from the start", "path", t.path)
		}
	}
	return nil
}

// matches reports whether f, which has r's identity, still holds what r
// consumed: it is not shorter and starts with the same line.
func (t *follower) matches(f *os.File, fi fs.FileInfo, r position) bool {
	if fi.Size() < r.Offset {
		return false
	}
	if r.Head == 0 {
		return true
	}
	t.br.Reset(io.NewSectionReader(f, 0, maxLine))
	line, err := t.br.ReadSlice('\n')
	return err == nil && hashLine(line) == r.Head
}

// read passes the complete lines from the position on to fn.
func (t *follower) read(fn func([]byte)) error {
	if t.f == nil {
		return nil
	}
	if _, err := t.f.Seek(t.pos.Offset, io.SeekStart); err != nil {
		return err
	}
	t.br.Reset(t.f)
	for {
		line, err := t.br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// Longer than maxLine: skip it up to its newline.
			t.pos.Offset += int64(len(line))
			t.skipping = true
			continue
		case errors.Is(err, io.EOF):
			return nil // a partial line waits for its newline
		case err != nil:
			return fmt.Errorf("reading %s: %w", t.path, err)
		}
		first := t.pos.Offset == 0
		t.pos.Offset += int64(len(line))
		if t.skipping {
			t.skipping = false
			continue
		}
		if first {
			t.pos.Head = hashLine(line)
		}
		fn(bytes.TrimSuffix(line[:len(line)-1], []byte("\r")))
	}
}

// finish consumes what follows the last newline of a file that will not
// grow any more, if it is a whole JSON object.
func (t *follower) finish(fn func([]byte)) {
	rest, err := io.ReadAll(io.NewSectionReader(t.f, t.pos.Offset, maxLine))
	if err != nil || len(rest) == 0 {
		return
	}
	t.pos.Offset += int64(len(rest))
	if !t.skipping && json.Valid(rest) {
		fn(rest)
	}
}

// finishRenamed reads to its end the file of r when it was renamed into
// the log's directory (rotated while the agent was stopped); without it,
// what was appended to it after r is lost, and said so.
func (t *follower) finishRenamed(r position, fn func([]byte)) {
	dir := filepath.Dir(t.path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil || idOf(fi) != r.File {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			break
		}
		old := &follower{path: p, log: t.log, br: t.br, f: f}
		if old.matches(f, fi, r) {
			old.pos = r
			if err := old.read(fn); err == nil {
				old.finish(fn)
			}
			t.log.Info("finished reading the access log rotated while the agent was stopped", "path", p)
		}
		f.Close()
		return
	}
	t.log.Warn("the proxy access log was rotated while the agent was stopped and the old file is gone (compressed or removed); "+
		"requests logged to it after the agent stopped are not counted", "path", t.path)
}

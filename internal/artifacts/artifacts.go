// Package artifacts keeps the files of database exports and uploaded
// imports in a directory of the data dir, encrypted with age as their
// bytes arrive, each to the recipient its writer names (the identity of
// the file's database instance, secrets.Key.InstanceIdentity): no plaintext byte of an artifact is ever written to
// disk, and none is held in memory beyond the copy buffer and age's
// 64 KiB chunk.
//
// A file is written under a temporary name (*.part) and renamed when it is
// complete, so a file without that suffix is always whole. Which files
// are in use is the store's business (artifact rows); Sweep removes what
// no row names.
package artifacts

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
)

// Suffixes of artifact files: a complete file, and one being written.
const (
	suffix     = ".age"
	partSuffix = ".age.part"
)

// copyBuffer is the size of the buffer bytes are copied through.
const copyBuffer = 256 << 10

// ErrTooLarge is the error of a Write whose content passed its limit.
var ErrTooLarge = errors.New("artifacts: content over the limit")

// Dir is a directory of encrypted artifact files.
type Dir struct {
	path string
}

// Open returns the artifact directory path, creating it (mode 0700) if
// missing.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("artifact directory: %w", err)
	}
	return &Dir{path: path}, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Written describes a file Write stored.
type Written struct {
	// File is the file's name in the directory.
	File string
	// Size and SHA256 (hex) are of the plaintext.
	Size   int64
	SHA256 string
}

// Write encrypts what r yields to recipient into a new file named after
// prefix and returns it. More than limit bytes (limit > 0) is ErrTooLarge. Any error,
// also ctx ending, leaves no file behind.
func (d *Dir) Write(ctx context.Context, prefix string, recipient age.Recipient, r io.Reader, limit int64) (w Written, err error) {
	if !validPrefix(prefix) {
		return Written{}, fmt.Errorf("artifacts: invalid file prefix %q", prefix)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Written{}, err
	}
	name := prefix + "-" + hex.EncodeToString(b[:])
	part := filepath.Join(d.path, name+partSuffix)
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Written{}, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(part)
		}
	}()
	buf := bufio.NewWriterSize(f, copyBuffer)
	enc, err := age.Encrypt(buf, recipient)
	if err != nil {
		return Written{}, err
	}
	sum := sha256.New()
	src := r
	if limit > 0 {
		src = io.LimitReader(r, limit+1)
	}
	n, err := io.CopyBuffer(io.MultiWriter(enc, sum), &ctxReader{ctx: ctx, r: src}, make([]byte, copyBuffer))
	if err != nil {
		return Written{}, err
	}
	if limit > 0 && n > limit {
		return Written{}, ErrTooLarge
	}
	if err := enc.Close(); err != nil {
		return Written{}, err
	}
	if err := buf.Flush(); err != nil {
		return Written{}, err
	}
	if err := f.Sync(); err != nil {
		return Written{}, err
	}
	if err := f.Close(); err != nil {
		return Written{}, err
	}
	if err := os.Rename(part, filepath.Join(d.path, name+suffix)); err != nil {
		return Written{}, err
	}
	return Written{File: name + suffix, Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))}, nil
}

// Open returns the plaintext of a file Write stored, decrypted with
// identity. Reading it fails if the file was altered (age authenticates
// every chunk).
func (d *Dir) Open(file string, identity age.Identity) (io.ReadCloser, error) {
	if !validFile(file) {
		return nil, fmt.Errorf("artifacts: invalid file name %q", file)
	}
	f, err := os.Open(filepath.Join(d.path, file))
	if err != nil {
		return nil, err
	}
	r, err := age.Decrypt(bufio.NewReaderSize(f, copyBuffer), identity)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("artifacts: %s: %w", file, err)
	}
	return &readCloser{Reader: r, c: f}, nil
}

// Remove deletes a file; a file that is not there is no error.
func (d *Dir) Remove(file string) error {
	if !validFile(file) {
		return fmt.Errorf("artifacts: invalid file name %q", file)
	}
	if err := os.Remove(filepath.Join(d.path, file)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Sweep removes the files last written before cutoff that keep does not
// claim: complete files no artifact names, and parts of writes that
// stopped (a write in progress keeps its part's time recent). It returns
// how many it removed.
func (d *Dir) Sweep(cutoff time.Time, keep func(file string) bool) (int, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, suffix) && !strings.HasSuffix(name, partSuffix) {
			continue
		}
		if strings.HasSuffix(name, suffix) && keep(name) {
			continue
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(d.path, name)); err == nil {
			n++
		} else if !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
	}
	return n, nil
}

func validPrefix(p string) bool {
	if p == "" || len(p) > 128 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validFile(f string) bool {
	return strings.HasSuffix(f, suffix) && validPrefix(strings.TrimSuffix(f, suffix))
}

type readCloser struct {
	io.Reader
	c io.Closer
}

func (r *readCloser) Close() error { return r.c.Close() }

// ctxReader ends a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

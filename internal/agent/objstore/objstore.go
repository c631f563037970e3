// Package objstore is where the agent keeps backups off the server: an
// S3-compatible bucket or a cloud drive folder, behind one interface. Each
// backend streams: an object is never held whole in memory or written to
// a temporary file.
package objstore

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is the error of reading, stating or deleting an object that
// does not exist.
var ErrNotFound = errors.New("object not found")

// Object is one stored object as the storage reports it.
type Object struct {
	// Key is the object's name under the store's prefix or folder.
	Key string
	// Size is its length in bytes.
	Size int64
	// SHA256 is the hex SHA-256 of its content as the storage recorded
	// it, or "" when the storage keeps none.
	SHA256 string
	// Modified is when the storage last wrote it.
	Modified time.Time
}

// Store is one storage target.
type Store interface {
	// Put stores r's content under key, replacing an object of that key.
	// size is the content's length, or -1 when it is not known in
	// advance. The returned Object is the storage's own record of what
	// it stored, read back after the upload, for the caller to compare
	// with the size and SHA-256 it counted while the content streamed.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error)
	// Stat reads an object's record without its content.
	Stat(ctx context.Context, key string) (Object, error)
	// Get opens an object's content for reading.
	Get(ctx context.Context, key string) (io.ReadCloser, Object, error)
	// List returns the objects whose keys start with prefix, in key order.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes an object; deleting one that does not exist is not
	// an error.
	Delete(ctx context.Context, key string) error
}

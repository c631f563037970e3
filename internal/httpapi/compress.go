package httpapi

import (
	"compress/gzip"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// compressMin is the smallest response worth compressing: below it the
// gzip header and the work cost more than they save.
const compressMin = 1024

// compressible are the content types compressed for clients that accept
// gzip: JSON answers and problems, and the web console's text files. The
// live stream (text/event-stream) and binary downloads are not.
var compressible = map[string]bool{
	"application/json":         true,
	"application/problem+json": true,
	"application/openapi+json": true,
	"application/javascript":   true,
	"text/javascript":          true,
	"text/css":                 true,
	"text/html":                true,
	"text/plain":               true,
	"image/svg+xml":            true,
}

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // a valid level never fails
	return w
}}

// withCompression gzips JSON and text responses for clients that send
// Accept-Encoding: gzip. The agent protocol is left alone: its answers are
// small and many, and its clients are many.
func (s *Server) withCompression(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/agent/") || r.Method == http.MethodHead || r.Header.Get("Range") != "" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			next.ServeHTTP(w, r)
			return
		}
		cw := &compressWriter{ResponseWriter: w}
		next.ServeHTTP(cw, r)
		// Not deferred: after a panic, the problem the recovery writes
		// replaces whatever was held back.
		cw.close()
	})
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip
// (listed without q=0).
func acceptsGzip(h string) bool {
	for part := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			if v, err := strconv.ParseFloat(q, 64); err == nil && v == 0 {
				return false
			}
		}
		return true
	}
	return false
}

// compressWriter decides whether to compress a response: a compressible
// type, not already encoded, with a body of at least compressMin bytes. A
// body of unknown length is held back until it reaches compressMin or
// ends, so that small answers go out as they are.
type compressWriter struct {
	http.ResponseWriter
	gz      *gzip.Writer
	status  int    // held back while pending
	pending bool   // the header waits for the decision
	buf     []byte // what was written while pending
	decided bool
}

func (w *compressWriter) WriteHeader(status int) {
	if w.decided || w.pending {
		return
	}
	h := w.Header()
	ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	n, lengthErr := strconv.Atoi(h.Get("Content-Length"))
	if status < 200 || status == http.StatusNoContent || status == http.StatusNotModified || status == http.StatusPartialContent ||
		h.Get("Content-Encoding") != "" || !compressible[ct] || (lengthErr == nil && n < compressMin) {
		w.decided = true
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.status, w.pending = status, true
}

// start sends the header, compressed when gzip is true, and what was held
// back.
func (w *compressWriter) start(gzipped bool) error {
	w.pending, w.decided = false, true
	if gzipped {
		h := w.Header()
		h.Del("Content-Length")
		h.Set("Content-Encoding", "gzip")
		w.gz = gzipWriters.Get().(*gzip.Writer)
		w.gz.Reset(w.ResponseWriter)
	}
	w.ResponseWriter.WriteHeader(w.status)
	buf := w.buf
	w.buf = nil
	if len(buf) == 0 {
		return nil
	}
	var err error
	if w.gz != nil {
		_, err = w.gz.Write(buf)
	} else {
		_, err = w.ResponseWriter.Write(buf)
	}
	return err
}

func (w *compressWriter) Write(b []byte) (int, error) {
	if !w.decided && !w.pending {
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", http.DetectContentType(b))
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.pending {
		w.buf = append(w.buf, b...)
		if len(w.buf) < compressMin {
			return len(b), nil
		}
		return len(b), w.start(true)
	}
	if w.gz != nil {
		return w.gz.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends what was written so far, for responses written in parts: a
// response still held back goes out as it is.
func (w *compressWriter) Flush() {
	if w.pending {
		w.start(false) //nolint:errcheck // the client may have gone; the next write says so
	}
	if w.gz != nil {
		w.gz.Flush() //nolint:errcheck // the client may have gone; the next write says so
	}
	http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // not every writer flushes
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *compressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// close ends the response: what is held back goes out as it is, a
// compressed body gets its trailer.
func (w *compressWriter) close() {
	if w.pending {
		w.start(false) //nolint:errcheck // the client may have gone
	}
	if w.gz == nil {
		return
	}
	w.gz.Close() //nolint:errcheck // the client may have gone
	w.gz.Reset(io.Discard)
	gzipWriters.Put(w.gz)
	w.gz = nil
}

package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/httpconn"
)

// detachWriteTimeout bounds writing a detached request's response.
const detachWriteTimeout = 10 * time.Second

// CanDetach reports whether the request being served can be detached
// (see Detach): the server was given Deps.Conns, the request is HTTP/1.x on
// a connection that can be taken over, and it is the connection's last
// request only if the client said so.
func CanDetach(ctx context.Context) bool {
	ri := info(ctx)
	if ri.srv == nil || ri.srv.deps.Conns == nil || ri.w == nil || ri.req.ProtoMajor != 1 {
		return false
	}
	_, ok := ri.w.(http.Hijacker)
	return ok
}

// Detach asks that, once the operation's handler returns, the request's
// connection be taken out of net/http and handed to fn, which answers it
// later (Detached.Respond) — a long poll that waits without holding a
// goroutine or net/http's buffers. What the handler returns is not
// written. fn runs on the request's goroutine; with nil the connection
// could not be taken, and the handler's answer was written instead.
// Detach reports false, and does nothing, when CanDetach is false.
func Detach(ctx context.Context, fn func(*Detached)) bool {
	if !CanDetach(ctx) {
		return false
	}
	info(ctx).detach = fn
	return true
}

// Detached is a request taken out of net/http, waiting for its answer:
// the connection and what is needed to answer and account for it.
type Detached struct {
	conn      net.Conn
	header    []byte // response header lines set before the handler ran
	keepAlive bool
	srv       *Server
	id        string
	method    string
	path      string
	pattern   string
	ip        string
	start     time.Time
	done      atomic.Bool
}

// detachRequest takes the connection of a request whose handler asked for
// it (Detach) and hands it over; when the connection cannot be taken, the
// status the handler set is written instead.
func (s *Server) detachRequest(w http.ResponseWriter, sw *statusWriter, r *http.Request, ri *requestInfo, start time.Time) {
	fn := ri.detach
	// The header lines every response carries (request id, security
	// headers), not those the operation's own answer set.
	h := w.Header().Clone()
	for _, k := range []string{"Content-Type", "Content-Length", "Cache-Control"} {
		h.Del(k)
	}
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		s.log.ErrorContext(r.Context(), "taking a waiting request's connection", "err", err.Error())
		ri.detach = nil
		status := sw.status
		if status == 0 {
			status = http.StatusNoContent
		}
		w.WriteHeader(status)
		fn(nil)
		return
	}
	var buffered []byte
	if n := rw.Reader.Buffered(); n > 0 {
		buffered, _ = rw.Reader.Peek(n)
	}
	var hb bytes.Buffer
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range h[k] {
			hb.WriteString(k)
			hb.WriteString(": ")
			hb.WriteString(v)
			hb.WriteString("\r\n")
		}
	}
	s.deps.Conns.Take()
	fn(&Detached{
		conn: httpconn.WithBuffered(httpconn.Unwrap(conn), buffered), header: hb.Bytes(),
		keepAlive: !r.Close,
		srv:       s, id: ri.id, method: r.Method, path: r.URL.Path, pattern: r.Pattern, ip: ri.client.IP, start: start,
	})
}

// Alive reports whether the client is still connected (see
// httpconn.Alive).
func (d *Detached) Alive() bool { return httpconn.Alive(d.conn) }

// Respond writes the answer (a complete HTTP/1.1 response with the headers
// every response carries and, with a body, its content type and length)
// and gives the connection back to the server for the client's next
// request, or closes it when keepAlive is false, the client asked for
// that, the write failed or the server is shutting down. It accounts for
// the request (log line, request metrics) like any other. Only the first
// Respond or Drop of a request does anything.
func (d *Detached) Respond(status int, contentType string, body []byte, keepAlive bool) {
	if !d.done.CompareAndSwap(false, true) {
		return
	}
	keep := keepAlive && d.keepAlive && !d.srv.deps.Conns.Closed()
	bw := bufio.NewWriterSize(d.conn, len(d.header)+len(body)+256)
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(status))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(status))
	bw.WriteString("\r\nDate: ")
	bw.WriteString(time.Now().UTC().Format(http.TimeFormat))
	bw.WriteString("\r\n")
	bw.Write(d.header)
	if len(body) > 0 {
		bw.WriteString("Content-Type: ")
		bw.WriteString(contentType)
		bw.WriteString("\r\n")
	}
	if status != http.StatusNoContent && status >= 200 {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.Itoa(len(body)))
		bw.WriteString("\r\n")
	}
	if !keep {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	bw.Write(body)
	d.conn.SetWriteDeadline(time.Now().Add(detachWriteTimeout)) //nolint:errcheck // a failed write says so
	err := bw.Flush()
	d.conn.SetWriteDeadline(time.Time{}) //nolint:errcheck // as above
	if err != nil {
		keep = false
	}
	if keep {
		d.srv.deps.Conns.Return(d.conn)
	} else {
		d.srv.deps.Conns.Drop(d.conn)
	}
	d.srv.observe(d.method, d.path, d.pattern, d.id, d.ip, status, int64(len(body)), d.start, false)
}

// RespondJSON answers with v as JSON (see Respond).
func (d *Detached) RespondJSON(status int, v any, keepAlive bool) {
	body, err := json.Marshal(v)
	if err != nil {
		d.RespondError(err)
		return
	}
	d.Respond(status, "application/json", body, keepAlive)
}

// RespondError answers with the problem err maps to, as the handler's
// error would have been, and closes the connection.
func (d *Detached) RespondError(err error) {
	ri := &requestInfo{id: d.id, client: audit.Caller{IP: d.ip}, req: &http.Request{URL: &url.URL{Path: d.path}}}
	ctx := context.WithValue(context.Background(), requestKey{}, ri)
	p := problemFor(ctx, d.srv.log, err)
	if p.Status == http.StatusUnauthorized {
		p.GetHeaders().Set("WWW-Authenticate", `Bearer realm="capstan"`)
	}
	body, merr := json.Marshal(p)
	if merr != nil {
		d.Drop()
		return
	}
	var extra bytes.Buffer
	for k, vs := range p.headers {
		for _, v := range vs {
			extra.WriteString(http.CanonicalHeaderKey(k) + ": " + v + "\r\n")
		}
	}
	extra.WriteString("Cache-Control: no-store\r\n")
	d.header = append(slices.Clip(d.header), extra.Bytes()...)
	d.Respond(p.Status, "application/problem+json", body, false)
}

// Drop closes the connection without an answer: its client is gone.
func (d *Detached) Drop() {
	if !d.done.CompareAndSwap(false, true) {
		return
	}
	d.srv.deps.Conns.Drop(d.conn)
	d.srv.log.LogAttrs(context.Background(), slog.LevelDebug, "request", slog.String("request_id", d.id),
		slog.String("method", d.method), slog.String("path", d.path), slog.String("outcome", "client gone"),
		slog.Float64("duration_ms", float64(time.Since(d.start).Microseconds())/1000), slog.String("ip", d.ip))
}

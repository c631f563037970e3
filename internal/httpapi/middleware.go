package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
)

type requestKey struct{}

type requestInfo struct {
	id     string
	client audit.Caller
	req    *http.Request
	// srv and w are the server and the response writer under the
	// middleware, for Detach; detach is what the handler asked to have
	// the connection handed to.
	srv    *Server
	w      http.ResponseWriter
	detach func(*Detached)
}

func info(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestKey{}).(*requestInfo)
	if ri == nil {
		return &requestInfo{req: &http.Request{}}
	}
	return ri
}

// requestID returns the id of the request being served.
func requestID(ctx context.Context) string { return info(ctx).id }

// clientOf returns the address and user agent of the request's client.
func clientOf(ctx context.Context) audit.Caller { return info(ctx).client }

// requestFrom returns the request being served, for cookies.
func requestFrom(ctx context.Context) *http.Request { return info(ctx).req }

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func newRequestID() string {
	var b [12]byte
	rand.Read(b[:]) //nolint:errcheck // never fails
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status and size of a response.
// Once the handler asked to detach the request (Detach), what it writes
// is dropped: the connection is answered later.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	ri     *requestInfo
}

func (w *statusWriter) detached() bool { return w.ri != nil && w.ri.detach != nil }

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	if w.detached() {
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.detached() {
		return len(b), nil
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// withRequestContext gives every request an id, resolves the client
// address, and writes one structured log line per request (at debug for
// the agent protocol's successes).
func (s *Server) withRequestContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-ID")
		if !validRequestID.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-ID", id)
		ri := &requestInfo{id: id, client: audit.Caller{IP: s.clientIP(r), UserAgent: r.UserAgent()}, srv: s, w: w}
		r = r.WithContext(context.WithValue(r.Context(), requestKey{}, ri))
		ri.req = r
		sw := &statusWriter{ResponseWriter: w, ri: ri}
		next.ServeHTTP(sw, r)
		if ri.detach != nil {
			s.detachRequest(w, sw, r, ri, start)
			return
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		// The mux set r.Pattern when a route matched.
		s.observe(r.Method, r.URL.Path, r.Pattern, id, ri.client.IP, sw.status, sw.bytes, start, r.Context().Err() != nil)
	})
}

// observe accounts for an answered request: the request metrics and one
// log line. gone is a request whose client went away before the answer
// (a browser leaving the page): its 503 request-cancelled is no server
// fault.
func (s *Server) observe(method, path, pattern, id, ip string, status int, bytes int64, start time.Time, gone bool) {
	took := time.Since(start)
	if s.deps.Requests != nil {
		s.deps.Requests.ObserveRequest(pattern, status, took)
	}
	// Agents make a few requests each every 10 s: thousands per
	// second from a large fleet. Their successes are logged at debug,
	// and so are the ones refused at the in-flight bound (a burst of
	// them is reported in one line, see agentSlots); their other
	// failures, like every other request, at info or error.
	level := slog.LevelInfo
	agent := strings.HasPrefix(path, "/agent/v1/")
	switch {
	case agent && (status < 400 || status == http.StatusServiceUnavailable):
		level = slog.LevelDebug
	case status >= 500 && !gone:
		level = slog.LevelError
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.LogAttrs(ctx, level, "request",
		slog.String("request_id", id), slog.String("method", method), slog.String("path", path),
		slog.Int("status", status), slog.Int64("bytes", bytes),
		slog.Float64("duration_ms", float64(took.Microseconds())/1000), slog.String("ip", ip))
}

func (s *Server) clientIP(r *http.Request) string {
	if s.deps.TrustedProxy {
		if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
			parts := strings.Split(xff, ",")
			if ip := net.ParseIP(strings.TrimSpace(parts[len(parts)-1])); ip != nil {
				return ip.String()
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// withRecover turns a panic in a handler into a 500 problem and a log line.
func (s *Server) withRecover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw, _ := w.(*statusWriter)
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "panic in handler", "request_id", requestID(r.Context()),
				"panic", v, "stack", string(debug.Stack()))
			if sw != nil && sw.status != 0 {
				// Too late for a problem: the status is out. Abort the
				// connection so the client sees the response is incomplete.
				panic(http.ErrAbortHandler)
			}
			p := newProblem(http.StatusInternalServerError, "", "An internal error occurred. The request id identifies it in the server log.")
			writeProblem(w, r, p)
		}()
		next.ServeHTTP(w, r)
	})
}

// agentClaimPath is the agent's claim long poll, whose connection is kept
// open for the agent's next claim.
const agentClaimPath = "/agent/v1/jobs/claim"

// withSecurityHeaders sets headers every response should carry, and closes
// the connection after an agent's report.
func (s *Server) withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if s.cookie.secure {
			// Served over HTTPS: browsers keep to HTTPS for a year.
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			h.Set("Cache-Control", "no-store")
		}
		if strings.HasPrefix(r.URL.Path, "/agent/v1/") && r.URL.Path != agentClaimPath {
			// An agent's claim long poll keeps its connection busy; its
			// reports, every 10 s or more, would otherwise keep a second
			// one open and idle per agent, each a file descriptor, a
			// goroutine and 8 KiB of buffers here. The connection closes
			// after the answer instead, so an agent holds one.
			h.Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w io.Writer, v any) {
	json.NewEncoder(w).Encode(v) //nolint:errchkjson // the client may have gone
}

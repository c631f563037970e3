package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// agentTransport is a simulated agent's HTTP/1.1 client. It sends the same
// requests a real agent's net/http client sends, but does the exchange in
// the calling goroutine: net/http's Transport keeps a reading and a writing
// goroutine, with their buffers, for every connection, and at 10,000 agents
// those were most of the simulator's memory and the cause of its garbage
// collections and scheduling delays, which the report then counted as the
// control plane's latency. Like the real client it keeps up to maxIdle
// connections for reuse (the claim long poll's), and a connection the
// control plane closes after answering (a report's) is closed here too.
type agentTransport struct {
	dialer  net.Dialer
	maxIdle int

	mu   sync.Mutex
	idle []*simConn
}

func newAgentTransport() *agentTransport {
	return &agentTransport{dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}, maxIdle: 2}
}

// simConn is one connection and the reader its responses are parsed from.
type simConn struct {
	net.Conn
	br *bufio.Reader
}

// aLongTimeAgo is a deadline in the past: it makes blocked reads and
// writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// errIdleClosed is a reused connection that the server had closed before
// the request reached it.
var errIdleClosed = errors.New("fleetsim: the server closed the idle connection")

func (t *agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		c, reused := t.take()
		if c == nil {
			conn, err := t.dialer.DialContext(req.Context(), "tcp", req.URL.Host)
			if err != nil {
				return nil, err
			}
			c = &simConn{Conn: conn, br: bufio.NewReaderSize(conn, 2048)}
		}
		resp, err := t.exchange(c, req, reused)
		if errors.Is(err, errIdleClosed) && req.GetBody != nil {
			// As net/http does: the request never reached the server, so it
			// is sent again on a new connection.
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
			continue
		}
		return resp, err
	}
}

// exchange writes req on c and reads the response's header; the body is
// read by the caller, and closing it gives c back or closes it.
func (t *agentTransport) exchange(c *simConn, req *http.Request, reused bool) (*http.Response, error) {
	stop := context.AfterFunc(req.Context(), func() { c.SetDeadline(aLongTimeAgo) }) //nolint:errcheck // unblocks the exchange
	fail := func(err error) (*http.Response, error) {
		stop()
		c.Close()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	if err := req.Write(c); err != nil {
		if reused {
			return fail(errIdleClosed)
		}
		return fail(err)
	}
	if _, err := c.br.Peek(1); err != nil {
		if reused && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)) {
			return fail(errIdleClosed)
		}
		return fail(err)
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return fail(err)
	}
	resp.Body = &simBody{ReadCloser: resp.Body, t: t, c: c, stop: stop, keep: !resp.Close && !req.Close}
	return resp, nil
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read"
}

// take returns an idle connection, if there is one.
func (t *agentTransport) take() (*simConn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.idle); n > 0 {
		c := t.idle[n-1]
		t.idle = t.idle[:n-1]
		return c, true
	}
	return nil, false
}

// put keeps c for the next request, or closes it when enough are kept.
func (t *agentTransport) put(c *simConn) {
	t.mu.Lock()
	if len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// CloseIdleConnections closes the kept connections (http.Client calls it).
func (t *agentTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// simBody is a response body: read to its end and closed, it gives its
// connection back for reuse; closed early, or after an error, it closes the
// connection.
type simBody struct {
	io.ReadCloser
	t    *agentTransport
	c    *simConn
	stop func() bool
	keep bool
	eof  bool
	once sync.Once
}

func (b *simBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *simBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		// A deadline set by a cancelled context poisons the connection.
		if b.stop() && b.keep && b.eof && b.c.br.Buffered() == 0 {
			b.t.put(b.c)
			return
		}
		b.c.Close()
	})
	return err
}

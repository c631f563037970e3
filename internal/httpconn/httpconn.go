// Package httpconn lets a request wait without holding net/http's
// per-connection resources: a handler takes its connection out of the
// server (http.Hijacker), keeps only the net.Conn while it waits, writes
// its complete response itself, and gives the connection back to the
// server for its next request through Returns, a net.Listener that
// http.Server.Serve accepts returned connections from.
//
// A connection served by net/http costs a goroutine (with its stack), a
// 4 KiB read buffer and a 4 KiB write buffer, plus a second goroutine
// while a request is in flight; a taken connection costs the socket and
// whatever its holder keeps.
package httpconn

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Returns is a listener of the connections given back with Return, to be
// served by the same http.Server as the listener they came from
// (srv.Serve(returns) beside srv.Serve(ln)). It also counts the
// connections taken out of the server, so that a shutdown can wait until
// each was answered.
type Returns struct {
	addr     net.Addr
	idleWait time.Duration
	back     chan net.Conn
	done     chan struct{}
	once     sync.Once

	mu     sync.Mutex // guards out and idle
	out    int
	idle   chan struct{} // closed when out drops to 0; nil while none waits
	closed bool
}

// NewReturns returns a listener of given-back connections that reports
// addr (the real listener's) as its address. idle is the server's
// IdleTimeout: how long a given-back connection may wait for the client's
// next request, as a kept-alive one may (the server would otherwise give
// it only its ReadHeaderTimeout, as to a new connection).
func NewReturns(addr net.Addr, idle time.Duration) *Returns {
	return &Returns{addr: addr, idleWait: idle, back: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the next connection given back; net.ErrClosed once
// Close was called.
func (r *Returns) Accept() (net.Conn, error) {
	select {
	case c := <-r.back:
		return c, nil
	case <-r.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; connections given back afterwards are closed. The
// server's Shutdown calls it.
func (r *Returns) Close() error {
	r.once.Do(func() {
		close(r.done)
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
	})
	return nil
}

// Addr is the address of the listener the connections came from.
func (r *Returns) Addr() net.Addr { return r.addr }

// Take counts a connection taken out of the server; each Take is ended by
// one Return or Drop.
func (r *Returns) Take() {
	r.mu.Lock()
	r.out++
	r.mu.Unlock()
}

// Return gives a taken connection back to be served: the server reads its
// next request. After Close it is closed instead.
func (r *Returns) Return(c net.Conn) {
	w := &idleConn{Conn: c, idle: r.idleWait}
	w.waiting.Store(true)
	select {
	case r.back <- w:
	case <-r.done:
		c.Close()
	}
	r.release()
}

// Drop closes a taken connection.
func (r *Returns) Drop(c net.Conn) {
	c.Close()
	r.release()
}

func (r *Returns) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out--
	if r.out == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

// Out returns how many taken connections were not yet returned or
// dropped.
func (r *Returns) Out() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out
}

// Wait waits until every taken connection was returned or dropped, or ctx
// ends.
func (r *Returns) Wait(ctx context.Context) error {
	r.mu.Lock()
	if r.out == 0 {
		r.mu.Unlock()
		return nil
	}
	if r.idle == nil {
		r.idle = make(chan struct{})
	}
	idle := r.idle
	r.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Closed reports whether Close was called: a connection answered now
// should be closed rather than given back.
func (r *Returns) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// idleConn is a given-back connection: until the first byte of the
// client's next request arrives, no read deadline earlier than idle from
// now is set, so it waits as long as a kept-alive connection would.
type idleConn struct {
	net.Conn
	idle    time.Duration
	waiting atomic.Bool
}

func (c *idleConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.waiting.Store(false)
	}
	return n, err
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.extend(t))
}

func (c *idleConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(c.extend(t))
}

// extend moves a read deadline of a connection still waiting for its
// next request to at least idle from now; a deadline in the past (an
// aborted read) and none are kept.
func (c *idleConn) extend(t time.Time) time.Time {
	if c.idle <= 0 || t.IsZero() || !c.waiting.Load() {
		return t
	}
	now := time.Now()
	if t.Before(now) {
		return t
	}
	if least := now.Add(c.idle); t.Before(least) {
		return least
	}
	return t
}

// Unwrap returns the connection under one given back with Return, for
// taking it out of the server again.
func Unwrap(c net.Conn) net.Conn {
	if w, ok := c.(*idleConn); ok {
		return w.Conn
	}
	return c
}

// WithBuffered returns c, or, when the server had already read bytes of
// the client's next request (buffered), a connection that reads those
// first.
func WithBuffered(c net.Conn, buffered []byte) net.Conn {
	if len(buffered) == 0 {
		return c
	}
	return &prefixConn{Conn: c, r: bytes.NewReader(bytes.Clone(buffered))}
}

type prefixConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if c.r.Len() > 0 {
		return c.r.Read(b)
	}
	return c.Conn.Read(b)
}

// Alive reports whether the client of a waiting request is still there:
// it has not closed or reset the connection. It does not block. A client
// that sent bytes while it should be waiting for the answer is taken as
// there (a pipelined request is answered after this one).
func Alive(c net.Conn) bool {
	if p, ok := c.(*prefixConn); ok {
		if p.r.Len() > 0 {
			return true
		}
		c = p.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			alive = true // nothing to read: the client waits
		case err != nil:
			alive = false // reset
		case n == 0:
			alive = false // closed
		}
		return true // never wait for readiness
	})
	return alive && err == nil
}

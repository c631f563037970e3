// Package buildkit is what the agent speaks of BuildKit, the engine's
// builder that a build with secrets needs: the session that hands a
// build its secrets, and the progress trace a BuildKit build reports.
//
// A BuildKit build through the Docker Engine API
// (POST /build?version=2&session=ID) asks the client for what the build
// needs through a session: the client opens it with POST /session, which
// the engine upgrades to h2c, and then serves gRPC over that connection
// while the engine is the gRPC client. A Session serves two methods
// there, and nothing else: the secrets service's GetSecret (a
// RUN --mount=type=secret reads the value from it, so the value is never
// in the build's arguments, history or layers) and the gRPC health check
// the engine polls to keep the session alive. The build context is sent
// as the build request's body, so the session serves no file sync.
//
// The gRPC protocol is spoken directly (HTTP/2 from net/http, messages
// encoded with protowire): two unary methods need neither a gRPC
// library nor BuildKit's client packages and what they bring along.
package buildkit

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Methods the session serves, as gRPC method paths.
const (
	MethodGetSecret   = "/moby.buildkit.secrets.v1.Secrets/GetSecret"
	MethodHealthCheck = "/grpc.health.v1.Health/Check"
)

// Headers of POST /session, as BuildKit names them.
const (
	headerSessionID        = "X-Docker-Expose-Session-Uuid"
	headerSessionName      = "X-Docker-Expose-Session-Name"
	headerSessionSharedKey = "X-Docker-Expose-Session-Sharedkey"
	headerSessionMethod    = "X-Docker-Expose-Session-Grpc-Method"
)

// discardLog takes the HTTP server's own messages (a peer that hangs up
// mid-stream): the build's outcome says what went wrong.
var discardLog = log.New(io.Discard, "", 0)

// Proto is the protocol POST /session upgrades to.
const Proto = "h2c"

// Dialer opens the session's connection: POST /session upgraded to
// proto with the headers meta (client.Client.DialHijack with its URL
// bound to "/session").
type Dialer func(ctx context.Context, proto string, meta map[string][]string) (net.Conn, error)

// Session is an open BuildKit session serving build secrets.
type Session struct {
	id  string
	srv *http.Server
	// done is closed when the connection is served no more.
	done chan struct{}
}

// OpenSession opens a session through dial and serves secrets (by id) on it
// until Close, until ctx ends or until the engine hangs up. name names
// the session in the engine's logs.
func OpenSession(ctx context.Context, dial Dialer, name string, secrets map[string][]byte) (*Session, error) {
	id := newID()
	meta := map[string][]string{
		headerSessionID:        {id},
		headerSessionName:      {name},
		headerSessionSharedKey: {id},
		headerSessionMethod:    {MethodGetSecret, MethodHealthCheck},
	}
	conn, err := dial(ctx, Proto, meta)
	if err != nil {
		return nil, err
	}
	return serve(ctx, id, conn, secrets), nil
}

// serve serves the session's methods on conn, whose peer is the gRPC
// client, until ctx ends, Close, or the peer hangs up.
func serve(ctx context.Context, id string, conn net.Conn, secrets map[string][]byte) *Session {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	s := &Session{id: id, done: make(chan struct{}),
		srv: &http.Server{Handler: &handler{secrets: secrets}, Protocols: &protocols, ErrorLog: discardLog}}
	stop := context.AfterFunc(ctx, func() { s.srv.Close() })
	go func() {
		defer close(s.done)
		// Serve returns when the connection is closed, by either side.
		s.srv.Serve(newConnListener(conn)) //nolint:errcheck // the end of the one connection
		stop()
		s.srv.Close()
	}()
	return s
}

// ID is the session's id, the build request's session parameter.
func (s *Session) ID() string { return s.id }

// Close ends the session and waits until its connection is closed.
func (s *Session) Close() {
	s.srv.Close()
	<-s.done
}

// newID returns a random session id, as long as BuildKit's own.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// connListener is a listener that accepts one connection, conn, and
// then blocks until closed. closed is closed with conn.
type connListener struct {
	mu     sync.Mutex
	conn   net.Conn // nil once accepted
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func newConnListener(conn net.Conn) *connListener {
	l := &connListener{addr: conn.LocalAddr(), closed: make(chan struct{})}
	l.conn = &trackedConn{Conn: conn, onClose: l.close}
	return l
}

func (l *connListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *connListener) close() { l.once.Do(func() { close(l.closed) }) }

// Close stops accepting; a connection accepted already stays open (the
// server closes it).
func (l *connListener) Close() error {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
	l.close()
	return nil
}

func (l *connListener) Addr() net.Addr {
	if l.addr == nil {
		return &net.UnixAddr{Name: "buildkit-session", Net: "unix"}
	}
	return l.addr
}

// trackedConn tells its listener when it is closed.
type trackedConn struct {
	net.Conn
	onClose func()
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.onClose()
	return err
}

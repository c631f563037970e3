package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// connServer is a loopback server that counts the connections it accepted
// and can close those idle between requests.
type connServer struct {
	*httptest.Server
	mu     sync.Mutex
	opened int
	idle   map[net.Conn]bool
	closed int
}

func newConnServer(t *testing.T, h http.HandlerFunc) *connServer {
	s := &connServer{idle: map[net.Conn]bool{}}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.opened++
		case http.StateIdle:
			s.idle[c] = true
		case http.StateActive:
			delete(s.idle, c)
		case http.StateClosed, http.StateHijacked:
			delete(s.idle, c)
			s.closed++
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *connServer) counts() (opened, idle, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened, len(s.idle), s.closed
}

// closeIdle closes the server side of every idle connection.
func (s *connServer) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.idle {
		c.Close()
	}
}

type echo struct {
	N    int    `json:"n"`
	Body string `json:"body,omitempty"`
}

func echoHandler(w http.ResponseWriter, r *http.Request) {
	var in echo
	b, _ := io.ReadAll(r.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if r.URL.Path == "/close" {
		w.Header().Set("Connection", "close")
	}
	if r.URL.Path == "/empty" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"n":%d,"body":%q}`, in.N+1, strings.Repeat("x", in.N))
}

func TestAgentTransportKeepsTheConnection(t *testing.T) {
	s := newConnServer(t, echoHandler)
	hc := &http.Client{Transport: newAgentTransport()}
	ctx := context.Background()
	for i := range 5 {
		var out echo
		if _, err := do(ctx, hc, http.MethodPost, s.URL+"/echo", "tok", echo{N: i}, &out, http.StatusOK); err != nil {
			t.Fatal(err)
		}
		if out.N != i+1 || len(out.Body) != i {
			t.Fatalf("reply %d: %+v", i, out)
		}
		if status, err := do(ctx, hc, http.MethodPost, s.URL+"/empty", "tok", echo{}, nil, http.StatusNoContent); err != nil || status != http.StatusNoContent {
			t.Fatalf("empty reply: %d %v", status, err)
		}
	}
	if opened, _, _ := s.counts(); opened != 1 {
		t.Fatalf("connections opened for 10 sequential calls: %d, want 1", opened)
	}
	// A large reply comes chunked.
	var out echo
	if _, err := do(ctx, hc, http.MethodPost, s.URL+"/echo", "tok", echo{N: 100000}, &out, http.StatusOK); err != nil || len(out.Body) != 100000 {
		t.Fatalf("large reply: %d bytes, %v", len(out.Body), err)
	}
	hc.CloseIdleConnections()
	testlab.Eventually(t, 10*time.Second, "the kept connection closed", func() bool { o, _, c := s.counts(); return c == o })
}

func TestAgentTransportClosesWhatTheServerCloses(t *testing.T) {
	s := newConnServer(t, echoHandler)
	tr := newAgentTransport()
	hc := &http.Client{Transport: tr}
	for i := range 3 {
		if _, err := do(context.Background(), hc, http.MethodPost, s.URL+"/close", "tok", echo{N: i}, nil, http.StatusOK); err != nil {
			t.Fatal(err)
		}
	}
	if opened, _, _ := s.counts(); opened != 3 {
		t.Fatalf("connections opened: %d, want one per call", opened)
	}
	if c, _ := tr.take(); c != nil {
		t.Fatal("a connection the server closed was kept")
	}
	testlab.Eventually(t, 10*time.Second, "every connection closed", func() bool { _, _, c := s.counts(); return c == 3 })
}

// A connection the server closed while it was idle is noticed at the next
// call, which is sent again on a new connection.
func TestAgentTransportRetriesOnAClosedIdleConnection(t *testing.T) {
	s := newConnServer(t, echoHandler)
	hc := &http.Client{Transport: newAgentTransport()}
	ctx := context.Background()
	if _, err := do(ctx, hc, http.MethodPost, s.URL+"/echo", "tok", echo{N: 1}, nil, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, 10*time.Second, "the connection idle", func() bool { _, idle, _ := s.counts(); return idle == 1 })
	s.closeIdle()
	testlab.Eventually(t, 10*time.Second, "the idle connection closed", func() bool { _, _, c := s.counts(); return c == 1 })
	var out echo
	if _, err := do(ctx, hc, http.MethodPost, s.URL+"/echo", "tok", echo{N: 2}, &out, http.StatusOK); err != nil || out.N != 3 {
		t.Fatalf("call after the server closed the idle connection: %+v %v", out, err)
	}
	if opened, _, _ := s.counts(); opened != 2 {
		t.Fatalf("connections opened: %d, want 2", opened)
	}
}

// A cancelled long poll returns at once, and its connection is not reused.
func TestAgentTransportCancelsALongPoll(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			started <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		echoHandler(w, r)
	})
	t.Cleanup(func() { close(release) })
	tr := newAgentTransport()
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := do(ctx, hc, http.MethodPost, s.URL+"/wait", "tok", echo{}, nil, http.StatusNoContent)
		errc <- err
	}()
	<-started
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled long poll did not return")
	}
	if c, _ := tr.take(); c != nil {
		t.Fatal("the cancelled call's connection was kept")
	}
	// The next call works, on a new connection.
	if _, err := do(context.Background(), hc, http.MethodPost, s.URL+"/echo", "tok", echo{}, nil, http.StatusOK); err != nil {
		t.Fatal(err)
	}
}

// Connecting to a port nothing listens on is refused, as the replica
// logic expects to see.
func TestAgentTransportRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hc := &http.Client{Transport: newAgentTransport()}
	_, err = do(context.Background(), hc, http.MethodPost, "http://"+addr+"/echo", "tok", echo{}, nil, http.StatusOK)
	if !refused(err) {
		t.Fatalf("call to a closed port: %v, want connection refused", err)
	}
}

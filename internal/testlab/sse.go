package testlab

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SSEMessage is one message read off a Server-Sent Events stream.
type SSEMessage struct {
	ID    int64
	Event string
	Data  string
}

// SSE reads a Server-Sent Events stream's messages as they come.
type SSE struct {
	Resp *http.Response
	msgs chan SSEMessage
}

// OpenSSE opens the stream at url with GET (ending it when the test
// ends) and fails the test unless it answers 200 text/event-stream.
func OpenSSE(t testing.TB, url string) *SSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		t.Fatalf("stream %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return ReadSSE(t, resp)
}

// ReadSSE reads the messages of an open stream's response.
func ReadSSE(t testing.TB, resp *http.Response) *SSE {
	c := &SSE{Resp: resp, msgs: make(chan SSEMessage, 1024)}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(c.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var m SSEMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.Event != "" {
					c.msgs <- m
				}
				m = SSEMessage{}
			case strings.HasPrefix(line, "id: "):
				m.ID, _ = strconv.ParseInt(line[4:], 10, 64)
			case strings.HasPrefix(line, "event: "):
				m.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				m.Data = line[6:]
			}
		}
	}()
	return c
}

// Next returns the next message, failing the test when none comes within
// wait or the stream ends.
func (c *SSE) Next(t testing.TB, wait time.Duration) SSEMessage {
	t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			t.Fatal("the stream ended")
		}
		return m
	case <-time.After(wait):
		t.Fatalf("no stream message within %s", wait)
	}
	return SSEMessage{}
}

// Until returns the messages up to and including the first for which
// done is true; each must come within wait of the one before.
func (c *SSE) Until(t testing.TB, wait time.Duration, done func(SSEMessage) bool) []SSEMessage {
	t.Helper()
	var out []SSEMessage
	for {
		m := c.Next(t, wait)
		out = append(out, m)
		if done(m) {
			return out
		}
	}
}

// Ends fails the test unless the stream ends within wait; messages that
// come before the end are skipped.
func (c *SSE) Ends(t testing.TB, wait time.Duration) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-c.msgs:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the stream did not end within %s", wait)
		}
	}
}

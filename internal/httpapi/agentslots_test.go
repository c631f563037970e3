package httpapi

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Slots taken in parallel never exceed the bound, and a burst of
// refusals is reported in one log line.
func TestAgentSlots(t *testing.T) {
	a := newAgentSlots(8)
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	var taken sync.WaitGroup
	var got, no int64
	var count sync.Mutex
	for range 64 {
		taken.Go(func() {
			if a.acquire() {
				count.Lock()
				got++
				count.Unlock()
				return
			}
			a.refuse(log)
			count.Lock()
			no++
			count.Unlock()
		})
	}
	taken.Wait()
	if got != 8 || no != 56 {
		t.Fatalf("acquired %d, refused %d; want 8 and 56", got, no)
	}
	mu.Lock()
	lines := strings.Count(buf.String(), "agent requests refused")
	mu.Unlock()
	if lines != 1 {
		t.Fatalf("log lines about refusals: %d, want 1:\n%s", lines, buf.String())
	}
	for range 8 {
		a.release()
	}
	if !a.acquire() {
		t.Fatal("no slot free after every one was released")
	}
	if p := busyProblem(); p.Status != 503 || p.GetHeaders().Get("Retry-After") == "" {
		t.Fatalf("busy problem: %+v", p)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

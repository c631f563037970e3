package ids

import (
	"strings"
	"sync"
	"testing"
	"time"
)

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

func wantIDForm(t *testing.T, id, prefix string) {
	t.Helper()
	if got, want := strings.HasPrefix(id, prefix+"_"), true; got != want {
		t.Fatalf("id %q has prefix %s_: got %v, want %v", id, prefix, got, want)
	}
	body := strings.TrimPrefix(id, prefix+"_")
	if got, want := len(body), 26; got != want {
		t.Fatalf("id %q body length: got %d, want %d", id, got, want)
	}
	if i := strings.IndexFunc(body, func(r rune) bool { return !strings.ContainsRune(alphabet, r) }); i >= 0 {
		t.Fatalf("id %q: character %q is not in the alphabet", id, body[i])
	}
}

func TestNewIsStrictlyIncreasing(t *testing.T) {
	prev := New(Audit)
	for range 10_000 {
		id := New(Audit)
		wantIDForm(t, id, Audit)
		if id <= prev {
			t.Fatalf("ids not increasing: %q after %q", id, prev)
		}
		prev = id
	}
}

func TestNewIsUniqueAcrossGoroutines(t *testing.T) {
	const workers, each = 8, 1000
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			local := make([]string, 0, each)
			for range each {
				local = append(local, New(Job))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				seen[id] = true
			}
		})
	}
	wg.Wait()
	if got, want := len(seen), workers*each; got != want {
		t.Fatalf("unique ids: got %d, want %d", got, want)
	}
}

func TestNewAtOrdersByTime(t *testing.T) {
	t1 := time.Now().Add(time.Hour)
	a := NewAt(Session, t1)
	b := NewAt(Session, t1.Add(time.Millisecond))
	if b <= a {
		t.Fatalf("later time: %q not after %q", b, a)
	}
	// The timestamp leads (48 bits, the first 9 characters hold 45 of
	// them): the same millisecond shares it.
	c := NewAt(Session, t1.Add(time.Millisecond))
	if got, want := c[:len(Session)+1+9], b[:len(Session)+1+9]; got != want {
		t.Fatalf("timestamp part in the same millisecond: got %q, want %q", got, want)
	}
	if c <= b {
		t.Fatalf("same millisecond: %q not after %q", c, b)
	}
	// An earlier time (a clock going backwards) still gives a larger id.
	d := NewAt(Session, t1.Add(-time.Hour))
	if d <= c {
		t.Fatalf("earlier time: %q not after %q", d, c)
	}
}

func TestPrefixes(t *testing.T) {
	for _, p := range []string{User, Session, Audit, Server, Job, Challenge} {
		wantIDForm(t, New(p), p)
	}
	if got, want := len(map[string]bool{User: true, Session: true, Audit: true, Server: true, Job: true, Challenge: true}), 6; got != want {
		t.Fatalf("distinct prefixes: got %d, want %d", got, want)
	}
}

func TestToken(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := Token("cat")
		if got, want := len(tok), len("cat_")+52; got != want {
			t.Fatalf("token %q length: got %d, want %d", tok, got, want)
		}
		if got, want := strings.HasPrefix(tok, "cat_"), true; got != want {
			t.Fatalf("token %q has prefix cat_: got %v, want %v", tok, got, want)
		}
		seen[tok] = true
	}
	if got, want := len(seen), 1000; got != want {
		t.Fatalf("unique tokens: got %d, want %d", got, want)
	}
	bare := Token("")
	if got, want := len(bare), 52; got != want {
		t.Fatalf("bare token length: got %d, want %d", got, want)
	}
	if got, want := strings.Contains(bare, "_"), false; got != want {
		t.Fatalf("bare token %q has a separator: got %v, want %v", bare, got, want)
	}
}

func TestHash(t *testing.T) {
	if got, want := Hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("hash: got %q, want %q", got, want)
	}
	if got, want := Hash("cat_x") != Hash("cat_y"), true; got != want {
		t.Fatalf("hashes of different tokens differ: got %v, want %v", got, want)
	}
}

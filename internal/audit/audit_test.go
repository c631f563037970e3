package audit_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func newLog(t *testing.T, s *store.Store) (*audit.Log, *testlab.Clock) {
	t.Helper()
	// Not UTC on purpose: Record must store UTC.
	clk := testlab.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.FixedZone("UTC+2", 2*3600)))
	return audit.NewLog(s, clk.Now), clk
}

// record appends n entries with the given action, one second apart.
func record(t *testing.T, l *audit.Log, clk *testlab.Clock, action string, n int) {
	t.Helper()
	for i := range n {
		clk.Advance(time.Second)
		e := audit.Entry{Actor: audit.Actor{Type: audit.ActorSystem}, Action: action, Details: map[string]any{"i": float64(i)}}
		if err := l.Append(context.Background(), e); err != nil {
			t.Fatalf("record %s: %v", action, err)
		}
	}
}

func wantInvalidField(t *testing.T, what string, err error, field string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Invalid {
		t.Fatalf("%s: got %v, want an Invalid fault", what, err)
	}
	if got, want := len(fe.Fields), 1; got != want {
		t.Fatalf("%s: got %d fields, want %d", what, got, want)
	}
	if got, want := fe.Fields[0].Field, field; got != want {
		t.Fatalf("%s: got field %q, want %q", what, got, want)
	}
}

func TestRecordFillsIDAndTime(t *testing.T) {
	l, clk := newLog(t, storetest.Open(t, store.SQLite))
	ctx := context.Background()
	if err := l.Append(ctx, audit.Entry{Actor: audit.Actor{Type: audit.ActorSystem}, Action: audit.UserCreated, ID: "forged", At: time.Unix(0, 0)}); err != nil {
		t.Fatalf("record: %v", err)
	}
	es, next, err := l.List(ctx, 0, "", "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if got, want := len(es), 1; got != want {
		t.Fatalf("entries: got %d, want %d", got, want)
	}
	if got, want := next, ""; got != want {
		t.Fatalf("next cursor: got %q, want %q", got, want)
	}
	e := es[0]
	if got, want := strings.HasPrefix(e.ID, "aud_"), true; got != want {
		t.Fatalf("id %q has prefix aud_: got %v, want %v", e.ID, got, want)
	}
	if !e.At.Equal(clk.Now()) {
		t.Fatalf("at: got %v, want %v", e.At, clk.Now())
	}
	if got, want := e.At.Location(), time.UTC; got != want {
		t.Fatalf("at location: got %v, want %v", got, want)
	}
	if e.Details == nil {
		t.Fatalf("details: got nil, want an empty map")
	}
	if got, want := len(e.Details), 0; got != want {
		t.Fatalf("details: got %d keys, want %d", got, want)
	}
}

func TestListValidation(t *testing.T) {
	l, clk := newLog(t, storetest.Open(t, store.SQLite))
	ctx := context.Background()
	record(t, l, clk, audit.UserCreated, 60)

	es, next, err := l.List(ctx, 0, "", "")
	if err != nil {
		t.Fatalf("list with limit 0: %v", err)
	}
	if got, want := len(es), audit.DefaultLimit; got != want {
		t.Fatalf("default limit: got %d entries, want %d", got, want)
	}
	if got, want := next != "", true; got != want {
		t.Fatalf("next cursor with more entries: got %v, want %v", got, want)
	}
	es, _, err = l.List(ctx, audit.MaxLimit, "", "")
	if err != nil {
		t.Fatalf("list with the maximum limit: %v", err)
	}
	if got, want := len(es), 60; got != want {
		t.Fatalf("maximum limit: got %d entries, want %d", got, want)
	}

	for _, limit := range []int{-1, audit.MaxLimit + 1} {
		_, _, err := l.List(ctx, limit, "", "")
		wantInvalidField(t, fmt.Sprintf("limit %d", limit), err, "limit")
	}
	for _, cursor := range []string{
		"!!!",
		"not a cursor",
		base64.RawURLEncoding.EncodeToString([]byte("a1:usr_0123")),
		base64.RawURLEncoding.EncodeToString([]byte("a2:aud_0123")),
		base64.RawURLEncoding.EncodeToString([]byte("a1:aud_" + strings.Repeat("0", 100))),
	} {
		_, _, err := l.List(ctx, 10, cursor, "")
		wantInvalidField(t, fmt.Sprintf("cursor %q", cursor), err, "before")
	}
	for _, action := range []string{"Auth.*", "auth.", "auth*", "*", ".auth", "auth.*.x", "auth..login", "auth login", strings.Repeat("a", 101)} {
		_, _, err := l.List(ctx, 10, "", action)
		wantInvalidField(t, fmt.Sprintf("action %q", action), err, "action")
	}
	for field, f := range map[string]audit.Filter{
		"actor":       {Actor: "ann smith"},
		"target_type": {TargetType: "server;drop"},
		"target_id":   {TargetID: strings.Repeat("x", 129)},
		"until":       {Since: time.Unix(100, 0), Until: time.Unix(100, 0)},
	} {
		_, _, err := l.Search(ctx, 10, "", f)
		wantInvalidField(t, field, err, field)
	}
	// Every problem is reported at once.
	_, _, err = l.List(ctx, 1000, "!!!", "BAD")
	if fe := fault.As(err); fe == nil || len(fe.Fields) != 3 {
		t.Fatalf("three bad parameters: got %v, want three fields", err)
	}
}

func TestListPaging(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		l, clk := newLog(t, s)
		ctx := context.Background()
		record(t, l, clk, audit.LoginFailed, 3)
		record(t, l, clk, audit.UserCreated, 1)
		record(t, l, clk, audit.Logout, 2)

		// All six, two per page: the last page has no cursor.
		var seen []string
		cursor := ""
		for page := 1; ; page++ {
			es, next, err := l.List(ctx, 2, cursor, "")
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			if got, want := len(es), 2; got != want {
				t.Fatalf("page %d: got %d entries, want %d", page, got, want)
			}
			for _, e := range es {
				seen = append(seen, e.Action)
			}
			if page == 3 {
				if got, want := next, ""; got != want {
					t.Fatalf("cursor after the last page: got %q, want %q", got, want)
				}
				break
			}
			if next == "" {
				t.Fatalf("page %d: got no cursor, want one", page)
			}
			cursor = next
		}
		if got, want := strings.Join(seen, " "), "auth.logout auth.logout user.created auth.login.failed auth.login.failed auth.login.failed"; got != want {
			t.Fatalf("entries newest first: got %q, want %q", got, want)
		}

		// Filtered by prefix: three auth.* entries of five, then the rest.
		es, next, err := l.List(ctx, 3, "", "auth.*")
		if err != nil {
			t.Fatalf("auth.* first page: %v", err)
		}
		if got, want := len(es), 3; got != want || next == "" {
			t.Fatalf("auth.* first page: got %d entries and cursor %q, want %d and a cursor", got, next, want)
		}
		es, next, err = l.List(ctx, 3, next, "auth.*")
		if err != nil {
			t.Fatalf("auth.* second page: %v", err)
		}
		if got, want := len(es), 2; got != want {
			t.Fatalf("auth.* second page: got %d entries, want %d", got, want)
		}
		if got, want := next, ""; got != want {
			t.Fatalf("cursor after the last auth.* page: got %q, want %q", got, want)
		}

		es, next, err = l.List(ctx, 10, "", audit.UserCreated)
		if err != nil {
			t.Fatalf("exact action: %v", err)
		}
		if got, want := len(es), 1; got != want || next != "" {
			t.Fatalf("exact action: got %d entries and cursor %q, want %d and none", got, next, want)
		}
	})
}

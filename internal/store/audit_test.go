package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// appendAudit stores one entry per action, one second apart, and returns
// them oldest first.
func appendAudit(t *testing.T, s *store.Store, actions ...string) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	for i, action := range actions {
		at := t0.Add(time.Duration(i) * time.Second)
		e := audit.Entry{ID: ids.NewAt(ids.Audit, at), At: at, Actor: audit.Actor{Type: audit.ActorSystem},
			Action: action, Details: map[string]any{"i": float64(i)}}
		if err := s.AppendAudit(context.Background(), e); err != nil {
			t.Fatalf("append %s: %v", action, err)
		}
		out = append(out, e)
	}
	return out
}

func listAudit(t *testing.T, s *store.Store, q audit.Query) []audit.Entry {
	t.Helper()
	got, err := s.ListAudit(context.Background(), q)
	if err != nil {
		t.Fatalf("list audit %+v: %v", q, err)
	}
	return got
}

func auditActions(es []audit.Entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.Action)
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

func TestAuditList(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		all := appendAudit(t, s, "auth", "auth.login.failed", "authx.foo", "auth.logout", "user.created", "auth_x.y", "aut.z", "auth.2fa.failed")

		got := listAudit(t, s, audit.Query{Limit: 100})
		if got, want := auditActions(got), "auth.2fa.failed aut.z auth_x.y user.created auth.logout authx.foo auth.login.failed auth"; got != want {
			t.Fatalf("newest first: got %q, want %q", got, want)
		}
		for i := 1; i < len(got); i++ {
			if got[i-1].ID <= got[i].ID {
				t.Fatalf("ids not descending: %q before %q", got[i-1].ID, got[i].ID)
			}
		}

		got = listAudit(t, s, audit.Query{Limit: 3})
		if got, want := auditActions(got), "auth.2fa.failed aut.z auth_x.y"; got != want {
			t.Fatalf("limit 3: got %q, want %q", got, want)
		}
		got = listAudit(t, s, audit.Query{Limit: 3, BeforeID: got[2].ID})
		if got, want := auditActions(got), "user.created auth.logout authx.foo"; got != want {
			t.Fatalf("second page: got %q, want %q", got, want)
		}
		got = listAudit(t, s, audit.Query{Limit: 3, BeforeID: all[0].ID})
		if got, want := len(got), 0; got != want {
			t.Fatalf("before the oldest: got %d entries, want %d", got, want)
		}

		for _, c := range []struct {
			what string
			q    audit.Query
			want string
		}{
			{"exact action", audit.Query{Limit: 100, Action: "auth.logout"}, "auth.logout"},
			{"exact action auth", audit.Query{Limit: 100, Action: "auth"}, "auth"},
			{"prefix auth.*", audit.Query{Limit: 100, Action: "auth.*"}, "auth.2fa.failed auth.logout auth.login.failed"},
			{"prefix with cursor", audit.Query{Limit: 1, Action: "auth.*", BeforeID: all[3].ID}, "auth.login.failed"},
			{"prefix auth.login.*", audit.Query{Limit: 100, Action: "auth.login.*"}, "auth.login.failed"},
			{"prefix nothing.*", audit.Query{Limit: 100, Action: "nothing.*"}, ""},
		} {
			if got := auditActions(listAudit(t, s, c.q)); got != c.want {
				t.Fatalf("%s: got %q, want %q", c.what, got, c.want)
			}
		}
	})
}

func TestAuditRoundTrip(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		e := audit.Entry{
			ID: ids.NewAt(ids.Audit, t0), At: t0,
			Actor:  audit.Actor{Type: audit.ActorUser, ID: "usr_1", Email: "alice@example.com"},
			Action: audit.LoginFailed, Target: audit.Target{Type: "user", ID: "usr_1"},
			IP: "2001:db8::1", UserAgent: strings.Repeat("a", 1000),
			Details: map[string]any{"reason": "wrong_password", "n": 3.5, "ok": true, "nested": map[string]any{"list": []any{"x", 1.0}}, "quote": `'"; --`},
		}
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatalf("append: %v", err)
		}
		got := listAudit(t, s, audit.Query{Limit: 10})
		if got, want := len(got), 1; got != want {
			t.Fatalf("entries: got %d, want %d", got, want)
		}
		g := got[0]
		if got, want := g.ID, e.ID; got != want {
			t.Fatalf("id: got %q, want %q", got, want)
		}
		if !g.At.Equal(t0) {
			t.Fatalf("at: got %v, want %v", g.At, t0)
		}
		if got, want := g.Actor, e.Actor; got != want {
			t.Fatalf("actor: got %+v, want %+v", got, want)
		}
		if got, want := g.Target, e.Target; got != want {
			t.Fatalf("target: got %+v, want %+v", got, want)
		}
		if got, want := g.Action, e.Action; got != want {
			t.Fatalf("action: got %q, want %q", got, want)
		}
		if got, want := g.IP, e.IP; got != want {
			t.Fatalf("ip: got %q, want %q", got, want)
		}
		if got, want := g.UserAgent, e.UserAgent[:512]; got != want {
			t.Fatalf("user agent: got %d bytes, want the first 512", len(got))
		}
		gotJSON, err := json.Marshal(g.Details)
		if err != nil {
			t.Fatal(err)
		}
		wantJSON, err := json.Marshal(e.Details)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(gotJSON), string(wantJSON); got != want {
			t.Fatalf("details: got %s, want %s", got, want)
		}
	})
}

func TestAuditLogIsAppendOnly(t *testing.T) {
	runWithRaw(t, func(t *testing.T, s *store.Store, raw *sql.DB) {
		es := appendAudit(t, s, "auth.logout", "user.created")
		for _, stmt := range []string{
			`UPDATE audit_log SET action = 'forged'`,
			`UPDATE audit_log SET details = '{}' WHERE id = '` + es[0].ID + `'`,
			`DELETE FROM audit_log`,
			`DELETE FROM audit_log WHERE id = '` + es[1].ID + `'`,
		} {
			_, err := raw.Exec(stmt)
			if err == nil {
				t.Fatalf("%s: got no error, want the append-only refusal", stmt)
			}
			if got, want := strings.Contains(err.Error(), "append-only"), true; got != want {
				t.Fatalf("%s: got error %v, want the append-only refusal", stmt, err)
			}
		}
		got := listAudit(t, s, audit.Query{Limit: 10})
		if got, want := auditActions(got), "user.created auth.logout"; got != want {
			t.Fatalf("entries after refused changes: got %q, want %q", got, want)
		}
		// Appending still works.
		appendAudit(t, s, "auth.login.failed")
		if got, want := len(listAudit(t, s, audit.Query{Limit: 10})), 3; got != want {
			t.Fatalf("entries after another append: got %d, want %d", got, want)
		}
	})
}

// TestAuditFilters: entries are filtered by actor (id or e-mail), by
// object (type, and id) and by time, together with the action and paging.
func TestAuditFilters(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		add := func(i int, actor audit.Actor, action, typ, id string) {
			at := t0.Add(time.Duration(i) * time.Minute)
			e := audit.Entry{ID: ids.NewAt(ids.Audit, at), At: at, Actor: actor, Action: action,
				Target: audit.Target{Type: typ, ID: id}, Details: map[string]any{}}
			if err := s.AppendAudit(context.Background(), e); err != nil {
				t.Fatal(err)
			}
		}
		ann := audit.Actor{Type: audit.ActorUser, ID: "usr_ann", Email: "ann@example.com"}
		bob := audit.Actor{Type: audit.ActorUser, ID: "usr_bob", Email: "bob@example.com"}
		add(0, ann, "server.enrollment.created", "server", "srv_1")
		add(1, bob, "server.revoked", "server", "srv_1")
		add(2, ann, "application.created", "application", "app_1")
		add(3, bob, "server.enrollment.created", "server", "srv_2")
		add(4, ann, "auth.logout", "session", "ses_1")

		for _, c := range []struct {
			q    audit.Query
			want string
		}{
			{audit.Query{Actor: "ann@example.com"}, "auth.logout application.created server.enrollment.created"},
			{audit.Query{Actor: "usr_bob"}, "server.enrollment.created server.revoked"},
			{audit.Query{TargetType: "server"}, "server.enrollment.created server.revoked server.enrollment.created"},
			{audit.Query{TargetType: "server", TargetID: "srv_1"}, "server.revoked server.enrollment.created"},
			{audit.Query{Actor: "ann@example.com", Action: "server.*"}, "server.enrollment.created"},
			{audit.Query{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, "application.created server.revoked"},
			{audit.Query{Since: t0.Add(3 * time.Minute)}, "auth.logout server.enrollment.created"},
			{audit.Query{Actor: "nobody@example.com"}, ""},
		} {
			c.q.Limit = 100
			if got := auditActions(listAudit(t, s, c.q)); got != c.want {
				t.Errorf("%+v: got %q, want %q", c.q, got, c.want)
			}
		}
		// Paging keeps the filter.
		page := listAudit(t, s, audit.Query{Limit: 1, TargetType: "server"})
		rest := listAudit(t, s, audit.Query{Limit: 100, TargetType: "server", BeforeID: page[0].ID})
		if got := auditActions(rest); got != "server.revoked server.enrollment.created" {
			t.Fatalf("second page: %q", got)
		}
	})
}

package logs

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/fault"
)

func intp(v int) *int { return &v }

func TestValidateAcceptsAndDefaults(t *testing.T) {
	p, err := Validate(Read{Source: "journal", Unit: "nginx.service", Priority: intp(3), Cursor: "s=abc"})
	if err != nil {
		t.Fatalf("valid journal read: %v", err)
	}
	if got, want := p.Lines, DefaultLines; got != want {
		t.Fatalf("default lines: got %d, want %d", got, want)
	}
	if got, want := *p.Priority, 3; got != want {
		t.Fatalf("priority: got %d, want %d", got, want)
	}
	if got, want := p.Cursor, "s=abc"; got != want {
		t.Fatalf("cursor: got %q, want %q", got, want)
	}
	p, err = Validate(Read{Source: "container", Container: "web-1", Lines: intp(1000)})
	if err != nil {
		t.Fatalf("valid container read: %v", err)
	}
	if got, want := p.Container, "web-1"; got != want {
		t.Fatalf("container: got %q, want %q", got, want)
	}
	if got, want := p.Lines, 1000; got != want {
		t.Fatalf("lines: got %d, want %d", got, want)
	}
	p, err = Validate(Read{Source: "journal", Unit: "a.service", Lines: intp(1)})
	if err != nil || p.Lines != 1 {
		t.Fatalf("one line: %+v %v", p, err)
	}
}

func TestValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		read  Read
		field string
	}{
		{"unknown source", Read{Source: "syslog", Unit: "a.service"}, "source"},
		{"no source", Read{Unit: "a.service"}, "source"},
		{"explicit zero lines", Read{Source: "journal", Unit: "a.service", Lines: intp(0)}, "lines"},
		{"negative lines", Read{Source: "journal", Unit: "a.service", Lines: intp(-1)}, "lines"},
		{"too many lines", Read{Source: "journal", Unit: "a.service", Lines: intp(1001)}, "lines"},
		{"shell metacharacters", Read{Source: "journal", Unit: "a;rm -rf /.service"}, "unit"},
		{"path separator", Read{Source: "journal", Unit: "../etc/passwd.service"}, "unit"},
		{"not a service", Read{Source: "journal", Unit: "sshd.socket"}, "unit"},
		{"priority out of range", Read{Source: "journal", Unit: "a.service", Priority: intp(8)}, "priority"},
		{"negative priority", Read{Source: "journal", Unit: "a.service", Priority: intp(-1)}, "priority"},
		{"container on journal", Read{Source: "journal", Unit: "a.service", Container: "x1"}, "container"},
		{"bad container name", Read{Source: "container", Container: "bad name!"}, "container"},
		{"container name with slash", Read{Source: "container", Container: "a/b"}, "container"},
		{"priority on container", Read{Source: "container", Container: "web", Priority: intp(3)}, "priority"},
		{"unit on container", Read{Source: "container", Container: "web", Unit: "a.service"}, "unit"},
		{"huge cursor", Read{Source: "container", Container: "web", Cursor: string(make([]byte, MaxCursorLen+1))}, "cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(tc.read)
			fe := fault.As(err)
			if fe == nil || fe.Kind != fault.Invalid {
				t.Fatalf("got %v, want an invalid-input fault", err)
			}
			found := false
			for _, f := range fe.Fields {
				found = found || f.Field == tc.field
			}
			if !found {
				t.Fatalf("fields %v: want one named %q", fe.Fields, tc.field)
			}
		})
	}
}

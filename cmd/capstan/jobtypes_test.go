package main

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestJobTypesRegistered: the control plane, as capstan serve builds it,
// registers every declared job type (each with a timeout, or it would
// not have started), and docs/api.md's job type table lists each one
// with its payload, its data and its timeout as registered.
func TestJobTypesRegistered(t *testing.T) {
	a, err := openApp(context.Background(), StoreFlags{DataDir: t.TempDir()}, "http://127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.store.Close() })
	registered := a.jobs.Types()
	var want []string
	for _, jt := range agentproto.JobTypes {
		name := jt.JobName()
		want = append(want, name)
		if !slices.Contains(registered, name) {
			t.Errorf("job type %s is declared but no capability registers it", name)
		}
	}
	for _, name := range registered {
		if !slices.Contains(want, name) {
			t.Errorf("job type %s is registered but agentproto.JobTypes does not declare it", name)
		}
	}

	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| .* \\|$")
	for _, m := range row.FindAllStringSubmatch(jobTypeTable(string(doc)), -1) {
		documented[m[1]] = m[0]
	}
	var expected []string
	ok := true
	for _, jt := range agentproto.JobTypes {
		spec, _ := a.jobs.Spec(jt.JobName())
		line := jobTypeRow(jt, spec.Timeout)
		expected = append(expected, line)
		if documented[jt.JobName()] != line {
			ok = false
			t.Errorf("docs/api.md's job type table: %s\n  has: %s\n want: %s", jt.JobName(), documented[jt.JobName()], line)
		}
	}
	if len(documented) != len(agentproto.JobTypes) {
		ok = false
		t.Errorf("docs/api.md's job type table has %d rows, want %d", len(documented), len(agentproto.JobTypes))
	}
	if !ok {
		t.Logf("the table as the code declares it:\n%s", strings.Join(expected, "\n"))
	}
}

// jobTypeTable is the part of docs/api.md under its "### Job types"
// heading.
func jobTypeTable(doc string) string {
	_, after, found := strings.Cut(doc, "\n### Job types\n")
	if !found {
		return ""
	}
	if end := strings.Index(after, "\n#"); end >= 0 {
		after = after[:end]
	}
	return after
}

// jobTypeRow is a job type's row of the table: its name, the fields of
// its payload and of its data (? marks one that may be left out), and
// its timeout.
func jobTypeRow(jt agentproto.Declared, timeout time.Duration) string {
	p, r := jt.Shape()
	return fmt.Sprintf("| `%s` | %s | %s | %s |", jt.JobName(), fields(p), fields(r), humanDuration(timeout))
}

// fields lists a struct's JSON field names.
func fields(t reflect.Type) string {
	var names []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
				name += "?"
			}
			names = append(names, "`"+name+"`")
		}
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return t.String()
	}
	walk(t)
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// humanDuration writes a timeout as the docs do: "2 minutes", "6 hours".
func humanDuration(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	}
	return unit(int64(d/time.Second), "second")
}

package apps

import (
	"fmt"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/fault"
)

func TestNameProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"web", true},
		{"a", true},
		{"0", true},
		{"my-app-2", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"-web", false},
		{"web-", false},
		{"Web", false},
		{"my_app", false},
		{"my.app", false},
		{"my app", false},
		{"ünïcode", false},
	} {
		if got := NameProblem(tc.name) == ""; got != tc.ok {
			t.Errorf("NameProblem(%q) = %q, want ok=%v", tc.name, NameProblem(tc.name), tc.ok)
		}
	}
	if p := NameProblem("Web"); !strings.Contains(p, "lowercase") {
		t.Errorf("uppercase name: %q, want a message about lowercase", p)
	}
}

func TestImageProblem(t *testing.T) {
	digest := "sha256:" + strings.Repeat("a1", 32)
	for _, tc := range []struct {
		ref  string
		ok   bool
		want string // part of the message
	}{
		{"nginx", true, ""},
		{"nginx:1.27", true, ""},
		{"nginx:latest", true, ""},
		{"library/nginx:1.27-alpine", true, ""},
		{"ghcr.io/acme/web:v1.2.3", true, ""},
		{"registry.example.com:5000/team/app/web:2024.01.02_1", true, ""},
		{"localhost/app", true, ""},
		{"localhost:5000/app:dev", true, ""},
		{"[::1]:5000/app", true, ""},
		{"nginx@" + digest, true, ""},
		{"nginx:1.27@" + digest, true, ""},
		{"my-org/my__app", true, ""},
		{"my-org/my.app", true, ""},
		{"a/b/c/d", true, ""},
		{"nginx:" + strings.Repeat("t", 128), true, ""},
		{"", false, "required"},
		{"Nginx", false, "lowercase"},
		{"acme/Web", false, "lowercase"},
		{"nginx:" + strings.Repeat("t", 129), false, "128"},
		{"nginx:", false, "tag"},
		{"nginx:-bad", false, "tag"},
		{"nginx:bad tag", false, "spaces"},
		{"nginx\n", false, "control"},
		{"nginx@sha256:abc", false, "digest"},
		{"nginx@md5:" + strings.Repeat("a", 32), false, "digest"},
		{"nginx@SHA256:" + strings.Repeat("A", 64), false, "digest"},
		{"//nginx", false, "empty"},
		{"nginx/", false, "empty"},
		{"-nginx", false, "component"},
		{"nginx-", false, "component"},
		{"ng..inx", false, "component"},
		{"ghcr.io:99999/x", false, "port"},
		{"ghcr.io:port/x", false, "port"},
		{"bad_host.io/x", false, "host"},
		{":1.0", false, "repository"},
		{strings.Repeat("a", 256), false, "255"},
		{strings.Repeat("a/", 300) + "a", false, "512"},
	} {
		p := ImageProblem(tc.ref)
		if (p == "") != tc.ok {
			t.Errorf("ImageProblem(%q) = %q, want ok=%v", tc.ref, p, tc.ok)
			continue
		}
		if !tc.ok && !strings.Contains(p, tc.want) {
			t.Errorf("ImageProblem(%q) = %q, want a message with %q", tc.ref, p, tc.want)
		}
	}
}

func TestHealthPathAndPort(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/healthz", true},
		{"/health?full=1", true},
		{"/" + strings.Repeat("a", 1023), true},
		{"", false},
		{"healthz", false},
		{"/ health", false},
		{"/health\x00", false},
		{"/health\t", false},
		{"/" + strings.Repeat("a", 1024), false},
	} {
		if got := HealthPathProblem(tc.path) == ""; got != tc.ok {
			t.Errorf("HealthPathProblem(%q) = %q, want ok=%v", tc.path, HealthPathProblem(tc.path), tc.ok)
		}
	}
	for _, tc := range []struct {
		port int
		ok   bool
	}{{1, true}, {80, true}, {65535, true}, {0, false}, {-1, false}, {65536, false}} {
		if got := PortProblem(tc.port) == ""; got != tc.ok {
			t.Errorf("PortProblem(%d): ok=%v, want %v", tc.port, got, tc.ok)
		}
	}
}

func TestParseMemory(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true},
		{"512m", 512 << 20, true},
		{"512M", 512 << 20, true},
		{"1g", 1 << 30, true},
		{"1G", 1 << 30, true},
		{"6m", 6 << 20, true},
		{"6144k", 6 << 20, true},
		{"6291456b", 6 << 20, true},
		{"6291455b", 0, false},
		{"5m", 0, false},
		{"1024", 0, false},
		{"1.5g", 0, false},
		{"-1g", 0, false},
		{"1t", 0, false},
		{"1 g", 0, false},
		{"g", 0, false},
		{"9999999999999999999g", 0, false},
		{"99999999999999g", 0, false},
	} {
		got, p := ParseMemory(tc.in)
		if (p == "") != tc.ok || got != tc.want {
			t.Errorf("ParseMemory(%q) = %d, %q; want %d, ok=%v", tc.in, got, p, tc.want, tc.ok)
		}
	}
}

func fieldsOf(err error) []string {
	fe := fault.As(err)
	if fe == nil {
		return nil
	}
	var out []string
	for _, f := range fe.Fields {
		out = append(out, f.Field)
	}
	return out
}

func TestValidateEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []EnvVar
		field string // "" for valid
	}{
		{"empty", nil, ""},
		{"valid", []EnvVar{{"A", "1"}, {"_b", ""}, {"DATABASE_URL", "postgres://x"}}, ""},
		{"max value", []EnvVar{{"BIG", strings.Repeat("x", MaxEnvValueBytes)}}, ""},
		{"empty key", []EnvVar{{"A", "1"}, {"", "x"}}, "env[1].key"},
		{"digit first", []EnvVar{{"1A", "x"}}, "env[0].key"},
		{"dash", []EnvVar{{"A", "1"}, {"B", "2"}, {"MY-VAR", "x"}}, "env[2].key"},
		{"space", []EnvVar{{"MY VAR", "x"}}, "env[0].key"},
		{"equals", []EnvVar{{"A=B", "x"}}, "env[0].key"},
		{"duplicate", []EnvVar{{"A", "1"}, {"A", "2"}}, "env[1].key"},
		{"value too big", []EnvVar{{"BIG", strings.Repeat("x", MaxEnvValueBytes+1)}}, "env[0].value"},
		{"NUL in value", []EnvVar{{"A", "a\x00b"}}, "env[0].value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs fault.Fields
			validateEnv(tc.env, &errs)
			err := errs.Err()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", fieldsOf(err))
				}
				return
			}
			if got := fieldsOf(err); len(got) != 1 || got[0] != tc.field {
				t.Fatalf("fields %v, want [%s]", got, tc.field)
			}
		})
	}
	many := make([]EnvVar, MaxEnvVars+1)
	for i := range many {
		many[i] = EnvVar{Key: fmt.Sprintf("K%d", i)}
	}
	var errs fault.Fields
	validateEnv(many, &errs)
	if got := fieldsOf(errs.Err()); len(got) != 1 || got[0] != "env" {
		t.Fatalf("201 variables: fields %v, want [env]", got)
	}
	var ok fault.Fields
	validateEnv(many[:MaxEnvVars], &ok)
	if ok.Err() != nil {
		t.Fatalf("200 variables: %v", fieldsOf(ok.Err()))
	}
}

func TestValidateSource(t *testing.T) {
	for _, tc := range []struct {
		src   Source
		field string
		msg   string
	}{
		{Source{Type: SourceImage, Image: "nginx"}, "", ""},
		{Source{Type: SourceImage}, "source.image", "required"},
		{Source{Type: SourceImage, Image: "Nginx"}, "source.image", "lowercase"},
		{Source{Type: SourceImage, Image: "nginx", Branch: "main"}, "source", "git"},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2, Branch: "main"}, "", ""},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2, Branch: "release/v1.2"}, "", ""},
		{Source{Type: SourceGit, RepoID: 2, Branch: "main"}, "source.installation_id", "required"},
		{Source{Type: SourceGit, InstallationID: 1, Branch: "main"}, "source.repo_id", "required"},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2}, "source.branch", "required"},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2, Branch: "a..b"}, "source.branch", "'..'"},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2, Branch: "-x"}, "source.branch", "start with '-'"},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2, Branch: "a b"}, "source.branch", "spaces"},
		{Source{Type: SourceGit, InstallationID: 1, RepoID: 2, Branch: "main", Image: "nginx"}, "source.image", "only for image"},
		{Source{Type: "zip"}, "source.type", "image or git"},
		{Source{}, "source.type", "image or git"},
	} {
		var errs fault.Fields
		validateSource(tc.src, &errs)
		if tc.field == "" {
			if len(errs) != 0 {
				t.Errorf("%+v: got %v, want valid", tc.src, errs)
			}
			continue
		}
		if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Message, tc.msg) {
			t.Errorf("%+v: got %v, want %s: …%s…", tc.src, errs, tc.field, tc.msg)
		}
	}
}

package backups

import "testing"

func TestSettingsRules(t *testing.T) {
	for _, c := range []struct {
		what, value string
		ok          bool
		check       func(string) string
	}{
		{"endpoint", "s3.eu-central-1.amazonaws.com", true, endpointProblem},
		{"endpoint", "127.0.0.1:9000", true, endpointProblem},
		{"endpoint", "[::1]:9000", true, endpointProblem},
		{"endpoint", "minio", true, endpointProblem},
		{"endpoint", "", false, endpointProblem},
		{"endpoint", "https://s3.amazonaws.com", false, endpointProblem},
		{"endpoint", "s3.amazonaws.com/bucket", false, endpointProblem},
		{"endpoint", "user@s3.amazonaws.com", false, endpointProblem},
		{"endpoint", "s3.amazonaws.com:0", false, endpointProblem},
		{"endpoint", "s3.amazonaws.com:70000", false, endpointProblem},
		{"endpoint", "-bad.example.com", false, endpointProblem},
		{"endpoint", "a..b", false, endpointProblem},
		{"endpoint", "::1", false, endpointProblem},
		{"bucket", "acme-backups", true, bucketProblem},
		{"bucket", "a.b.c", true, bucketProblem},
		{"bucket", "ab", false, bucketProblem},
		{"bucket", "Acme", false, bucketProblem},
		{"bucket", "acme_backups", false, bucketProblem},
		{"bucket", "-acme", false, bucketProblem},
		{"bucket", "acme-", false, bucketProblem},
		{"bucket", "a..b", false, bucketProblem},
		{"bucket", "192.168.1.1", false, bucketProblem},
		{"region", "eu-central-1", true, regionProblem},
		{"region", "", true, regionProblem},
		{"region", "EU", false, regionProblem},
		{"ca", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", false, caProblem},
		{"ca", "junk", false, caProblem},
	} {
		if got := c.check(c.value); (got == "") != c.ok {
			t.Errorf("%s %q: problem %q, want ok=%v", c.what, c.value, got, c.ok)
		}
	}
	for in, want := range map[string]string{"": "", "capstan": "capstan/", "a/b/": "a/b/", "a b/c": "a b/c/"} {
		if got, p := normalPrefix(in); got != want || p != "" {
			t.Errorf("prefix %q → %q (%s), want %q", in, got, p, want)
		}
	}
	for _, in := range []string{"/a", "a//b", "a/../b", "./a", "a\\b", "a\nb"} {
		if _, p := normalPrefix(in); p == "" {
			t.Errorf("prefix %q taken", in)
		}
	}
}

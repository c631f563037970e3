package agentproto

import "testing"

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		cmp  int
		ok   bool
	}{
		{"7.0", "7.2", -1, true},
		{"7.10", "7.2", 1, true},
		{"7.0", "7.0.0", 0, true},
		{"7.0.15", "7.0", 1, true},
		{"15", "15.4", -1, true},
		{"16", "15.4", 1, true},
		{"10.11", "11.4", -1, true},
		{"", "7.0", 0, false},
		{"7.x", "7.0", 0, false},
		{"7..0", "7.0", 0, false},
		{"-1", "7.0", 0, false},
	} {
		cmp, ok := CompareVersions(c.a, c.b)
		if cmp != c.cmp || ok != c.ok {
			t.Errorf("CompareVersions(%q, %q) = %d, %t; want %d, %t", c.a, c.b, cmp, ok, c.cmp, c.ok)
		}
	}
}

func TestLoadVersion(t *testing.T) {
	redis := []string{"7.4", "7.2"}
	postgres := []string{"17", "16", "15", "14", "13"}
	mariadb := []string{"11.4", "10.11", "10.6"}
	for _, c := range []struct {
		name string
		src  string
		have []string
		want string
		ok   bool
	}{
		{"exact match", "7.2", redis, "7.2", true},
		{"exact match though a newer one exists", "15", postgres, "15", true},
		{"exact match with fewer numbers", "7.2.0", redis, "7.2", true},
		{"newer chosen", "7.3", redis, "7.4", true},
		{"newest at or above", "7.0", redis, "7.4", true},
		{"newest at or above, any order", "7.0", []string{"7.2", "7.4", "6.2"}, "7.4", true},
		{"newest at or above, postgres", "12", postgres, "17", true},
		{"newest at or above, mariadb", "10.5", mariadb, "11.4", true},
		{"newer with a two-digit minor", "10.6", []string{"10.11", "10.5"}, "10.11", true},
		{"older refused", "8.0", redis, "", false},
		{"older refused, postgres", "18", postgres, "", false},
		{"older refused, mariadb", "11.8", mariadb, "", false},
		{"none to choose from", "7.0", nil, "", false},
		{"unknown source version", "", redis, "", false},
		{"unreadable versions passed over", "7.0", []string{"latest", "7.2"}, "7.2", true},
		{"a host server's full version", "7.0", []string{"7.0.15"}, "7.0.15", true},
		{"a host server's full version, older", "7.2", []string{"7.0.15"}, "", false},
	} {
		got, ok := LoadVersion(c.src, c.have)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: LoadVersion(%q, %q) = %q, %t; want %q, %t", c.name, c.src, c.have, got, ok, c.want, c.ok)
		}
	}
}

package agentproto

import (
	"strings"
	"testing"
)

func TestDBIdentifierProblem(t *testing.T) {
	for _, c := range []struct {
		engine, kind, name string
		ok                 bool
	}{
		{EnginePostgres, DBIdentUser, "app_reader", true},
		{EnginePostgres, DBIdentUser, "_x1", true},
		{EnginePostgres, DBIdentUser, `a"; DROP TABLE x; --`, false},
		{EnginePostgres, DBIdentUser, "1abc", false},
		{EnginePostgres, DBIdentUser, "pg_signal", false},
		{EnginePostgres, DBIdentUser, "PUBLIC", false},
		{EnginePostgres, DBIdentDatabase, strings.Repeat("d", 63), true},
		{EnginePostgres, DBIdentDatabase, strings.Repeat("d", 64), false},
		{EnginePostgres, DBIdentDatabase, "template1", false},
		{EnginePostgres, DBIdentUser, "héllo", false},
		{EngineMySQL, DBIdentUser, strings.Repeat("u", 32), true},
		{EngineMySQL, DBIdentUser, strings.Repeat("u", 33), false},
		{EngineMariaDB, DBIdentUser, strings.Repeat("u", 80), true},
		{EngineMariaDB, DBIdentUser, strings.Repeat("u", 81), false},
		{EngineMariaDB, DBIdentDatabase, strings.Repeat("d", 65), false},
		{EngineMariaDB, DBIdentDatabase, "information_schema", false},
		{EngineMySQL, DBIdentDatabase, "a`b", false},
		{EngineRedis, DBIdentUser, "default", false},
		{EngineRedis, DBIdentUser, "app_ro", true},
		{"mongodb", DBIdentUser, "x", false},
		{EngineRedis, DBIdentUser, "", false},
	} {
		if p := DBIdentifierProblem(c.engine, c.kind, c.name); (p == "") != c.ok {
			t.Errorf("%s %s %q: problem %q, want ok %v", c.engine, c.kind, c.name, p, c.ok)
		}
	}
	for p, ok := range map[string]bool{"app:*": true, "": false, "a b": false, "a\x00": false, strings.Repeat("k", 257): false} {
		if got := DBKeyPatternProblem(p) == ""; got != ok {
			t.Errorf("key pattern %q: ok %v, want %v", p, got, ok)
		}
	}
}

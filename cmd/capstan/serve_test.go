package main

import (
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestServeValidatesFlags: capstan serve checks its flags before it
// listens, opens the store or makes the data dir; the defaults pass, and
// each wrong value is refused with a message naming its flag.
func TestServeValidatesFlags(t *testing.T) {
	parse := func(args ...string) error {
		var c cli
		p, err := kong.New(&c, kong.Name("capstan"), kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Parse(append([]string{"serve"}, args...))
		return err
	}
	if err := parse(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--enrollment-ttl", "1s"}, "--enrollment-ttl"},
		{[]string{"--agent-max-in-flight", "2"}, "--agent-max-in-flight"},
		{[]string{"--metrics-rollup-interval", "2h"}, "--metrics-rollup-interval"},
		{[]string{"--alert-evaluation-interval", "0s"}, "--alert-evaluation-interval"},
		{[]string{"--domain-check-interval", "200h"}, "--domain-check-interval"},
		{[]string{"--notify-allow-destinations", "10.0.0.0/8,nope"}, "--notify-allow-destinations"},
		{[]string{"--job-output-retention", "30m"}, "--job-output-retention"},
		{[]string{"--database-export-ttl", "10s"}, "--database-export-ttl"},
		{[]string{"--database-import-max-size", "lots"}, "--database-import-max-size"},
		{[]string{"--backup-local-keep", "101"}, "--backup-local-keep"},
		{[]string{"--backup-local-dir", "relative/dir"}, "--backup-local-dir"},
		{[]string{"--backup-schedule-interval", "2h"}, "--backup-schedule-interval"},
		{[]string{"--backup-schedule-jitter", "-1s"}, "--backup-schedule-jitter"},
		{[]string{"--restart-lease-grace", "2h"}, "--restart-lease-grace"},
	} {
		err := parse(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("serve %s: %v, want an error naming %s", strings.Join(c.args, " "), err, c.flag)
		}
	}
}

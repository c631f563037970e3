package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
)

// TestCommandsRefuseAnotherSecretKey runs capstan serve, then commands
// on its store from another data dir: one with a key of its own, one with
// none, one with another key in CAPSTAN_SECRET_KEY. Each exits non-zero,
// names the key the store expects (and its own), says how to pass the
// right one and writes nothing: no user, no key file. serve with another
// key does not start. With the server's key the same command works, and
// its user signs in.
func TestCommandsRefuseAnotherSecretKey(t *testing.T) {
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		raw, err := os.ReadFile(filepath.Join(cp.DataDir, secrets.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		serverKey, err := secrets.ParseKey(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		databaseURL := cp.DatabaseURL
		if cp.Dialect == store.SQLite {
			databaseURL = "sqlite:" + filepath.Join(cp.DataDir, store.FileName)
		}
		create := func(env []string, dataDir, email string) CLIResult {
			return runCLI(t, childEnv(env), testPassword+"\n", "user", "create", "--email", email, "--password-stdin", "--json",
				"--data-dir", dataDir, "--database-url", databaseURL)
		}
		refused := func(what string, res CLIResult, ids ...string) {
			t.Helper()
			if res.ExitCode == 0 {
				t.Fatalf("%s: exit 0, want a refusal\nstdout: %s", what, res.Stdout)
			}
			for _, want := range append(ids, "--data-dir", "CAPSTAN_SECRET_KEY") {
				if !strings.Contains(res.Stderr, want) {
					t.Fatalf("%s: stderr does not name %s:\n%s", what, want, res.Stderr)
				}
			}
		}

		otherKey := secrets.GenerateKey()
		withKey := t.TempDir()
		if err := os.WriteFile(filepath.Join(withKey, secrets.KeyFile), []byte(otherKey.Encode()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		refused("user create with another data dir's key", create(nil, withKey, "alice@example.com"), serverKey.ID(), otherKey.ID())
		envKey := secrets.GenerateKey()
		refused("user create with another CAPSTAN_SECRET_KEY",
			create([]string{"CAPSTAN_SECRET_KEY=" + envKey.Encode()}, t.TempDir(), "bob@example.com"), serverKey.ID(), envKey.ID())
		empty := t.TempDir()
		refused("user create with a data dir without a key", create(nil, empty, "carol@example.com"), serverKey.ID())
		if _, err := os.Stat(filepath.Join(empty, secrets.KeyFile)); !os.IsNotExist(err) {
			t.Fatalf("%s after a refused command: %v, want none", secrets.KeyFile, err)
		}
		refused("migrate with another key", runCLI(t, childEnv(nil), "", "migrate", "--data-dir", withKey, "--database-url", databaseURL),
			serverKey.ID(), otherKey.ID())
		refused("serve with another key", runCLI(t, childEnv(nil), "", "serve", "--listen", "127.0.0.1:0",
			"--data-dir", withKey, "--database-url", databaseURL), serverKey.ID(), otherKey.ID())

		res := cp.CLI(t, "", append([]string{"user", "list", "--json"}, cp.StoreArgs()...)...)
		if res.ExitCode != 0 {
			t.Fatalf("user list: exit %d\n%s", res.ExitCode, res.Stderr)
		}
		var users []User
		if err := json.Unmarshal([]byte(res.Stdout), &users); err != nil {
			t.Fatalf("user list --json: %v\n%s", err, res.Stdout)
		}
		if len(users) != 1 || users[0].Email != admin.Email {
			t.Fatalf("users after refused commands: %s, want only %s", res.Stdout, admin.Email)
		}

		// The server's key, from another directory, is the remedy.
		res = create([]string{"CAPSTAN_SECRET_KEY=" + serverKey.Encode()}, t.TempDir(), "dave@example.com")
		if res.ExitCode != 0 {
			t.Fatalf("user create with the server's key: exit %d\n%s", res.ExitCode, res.Stderr)
		}
		var u User
		if err := json.Unmarshal([]byte(res.Stdout), &u); err != nil {
			t.Fatalf("user create --json: %v\n%s", err, res.Stdout)
		}
		u.Password = testPassword
		signInUser(t, cp, u)
	})
}

package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func TestRecoveryKit(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		s := signInUser(t, cp, admin)

		keyFile, err := os.ReadFile(filepath.Join(cp.DataDir, "secret.key"))
		if err != nil {
			t.Fatal(err)
		}
		secretKey := strings.TrimSpace(string(keyFile))

		expectProblem(t, cp.Post(t, "/api/v1/platform/recovery-kit", "", map[string]string{"password": admin.Password}),
			http.StatusUnauthorized, "invalid-token")

		r := cp.Post(t, "/api/v1/platform/recovery-kit", s.AccessToken, map[string]string{"password": admin.Password})
		expectStatus(t, r, http.StatusOK)
		if got, want := r.Header.Get("Content-Type"), "application/octet-stream"; got != want {
			t.Fatalf("Content-Type: got %q, want %q", got, want)
		}
		cd := r.Header.Get("Content-Disposition")
		if !regexp.MustCompile(`^attachment; filename="capstan-recovery-kit-\d{8}-\d{6}\.age"$`).MatchString(cd) {
			t.Fatalf("Content-Disposition: got %q, want an attachment named capstan-recovery-kit-<time>.age", cd)
		}
		if got, want := r.Header.Get("Cache-Control"), "no-store"; got != want {
			t.Fatalf("Cache-Control: got %q, want %q", got, want)
		}
		if !bytes.HasPrefix(r.Body, []byte("age-encryption.org/v1\n")) {
			t.Fatalf("the kit is not an age file: %.60q", r.Body)
		}
		if bytes.Contains(r.Body, []byte(secretKey)) {
			t.Fatal("the kit holds the secret key in the clear")
		}
		kitFile := filepath.Join(t.TempDir(), "kit.age")
		if err := os.WriteFile(kitFile, r.Body, 0o600); err != nil {
			t.Fatal(err)
		}

		res := cp.CLI(t, admin.Password+"\n", "recovery-kit", "open", "--file", kitFile, "--json")
		if res.ExitCode != 0 {
			t.Fatalf("recovery-kit open: exit %d: %s", res.ExitCode, res.Stderr)
		}
		var kit struct {
			Format      string `json:"format"`
			PublicURL   string `json:"public_url"`
			Version     string `json:"version"`
			SecretKey   string `json:"secret_key"`
			SecretKeyID string `json:"secret_key_id"`
			Schema      struct {
				Dialect string `json:"dialect"`
				Version int64  `json:"version"`
			} `json:"schema"`
			ArtifactIdentity string `json:"artifact_identity"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &kit); err != nil {
			t.Fatalf("recovery-kit open --json: %v: %s", err, res.Stdout)
		}
		if got, want := kit.SecretKey, secretKey; got != want {
			t.Fatalf("kit secret_key: got %q, want the content of secret.key %q", got, want)
		}
		for _, c := range []struct{ field, got, want string }{
			{"format", kit.Format, "capstan-recovery-kit/1"},
			{"public_url", kit.PublicURL, cp.URL},
			{"version", kit.Version, buildVersion},
			{"schema.dialect", kit.Schema.Dialect, string(cp.Dialect)},
		} {
			if c.got != c.want {
				t.Fatalf("kit %s: got %q, want %q", c.field, c.got, c.want)
			}
		}
		if kit.SecretKeyID == "" || kit.Schema.Version < 1 {
			t.Fatalf("kit: secret_key_id %q, schema version %d", kit.SecretKeyID, kit.Schema.Version)
		}
		// The identity database exports are encrypted to: the one in the
		// data dir.
		identityFile, err := os.ReadFile(filepath.Join(cp.DataDir, "artifacts.agekey"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(kit.ArtifactIdentity, "AGE-SECRET-KEY-1") || !strings.Contains(string(identityFile), "\n"+kit.ArtifactIdentity+"\n") {
			t.Fatalf("kit artifact_identity %q is not the data dir's:\n%s", kit.ArtifactIdentity, identityFile)
		}

		// A wrong password is refused, on the endpoint and by the CLI.
		r = cp.Post(t, "/api/v1/platform/recovery-kit", s.AccessToken, map[string]string{"password": "not my password at all"})
		expectProblem(t, r, http.StatusForbidden, "wrong-password")
		res = cp.CLI(t, "not my password at all\n", "recovery-kit", "open", "--file", kitFile, "--json")
		if res.ExitCode == 0 {
			t.Fatal("recovery-kit open with a wrong password: exit 0, want non-zero")
		}
		if res.Stdout != "" {
			t.Fatalf("recovery-kit open with a wrong password printed %q", res.Stdout)
		}
		if strings.Contains(res.Stderr, secretKey) {
			t.Fatal("recovery-kit open with a wrong password shows the key")
		}

		// Both outcomes are in the audit log.
		entries := auditEntries(t, cp, s.AccessToken, "platform.recovery_kit.*")
		var actions []string
		for _, e := range entries {
			if e.Actor.ID != admin.ID || e.Actor.Email != admin.Email {
				t.Fatalf("%s actor: got %+v, want the administrator", e.Action, e.Actor)
			}
			actions = append(actions, e.Action)
			if e.Action == "platform.recovery_kit.refused" && e.Details["reason"] != "wrong_password" {
				t.Fatalf("refusal reason: got %v, want wrong_password", e.Details["reason"])
			}
		}
		if got, want := strings.Join(actions, ","), "platform.recovery_kit.refused,platform.recovery_kit.downloaded"; got != want {
			t.Fatalf("audit actions, newest first: got %s, want %s", got, want)
		}
		for _, e := range entries {
			b, _ := json.Marshal(e)
			if strings.Contains(string(b), secretKey) || strings.Contains(string(b), admin.Password) {
				t.Fatalf("audit entry holds a secret: %s", b)
			}
		}
	})
}

// TestRecoveryKitRestores loses the secret key file and starts the control
// plane again on the same store with only the kit's key, as a restore
// would: sign-in works, so the sealed TOTP secrets open with it.
func TestRecoveryKitRestores(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		s := signInUser(t, cp, admin)
		r := cp.Post(t, "/api/v1/platform/recovery-kit", s.AccessToken, map[string]string{"password": admin.Password})
		expectStatus(t, r, http.StatusOK)
		kitFile := filepath.Join(t.TempDir(), "kit.age")
		if err := os.WriteFile(kitFile, r.Body, 0o600); err != nil {
			t.Fatal(err)
		}
		res := cp.CLI(t, admin.Password+"\n", "recovery-kit", "open", "--file", kitFile, "--json")
		if res.ExitCode != 0 {
			t.Fatalf("recovery-kit open: exit %d: %s", res.ExitCode, res.Stderr)
		}
		var kit struct {
			SecretKey string `json:"secret_key"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &kit); err != nil {
			t.Fatal(err)
		}
		cp.Stop(t)
		if err := os.Remove(filepath.Join(cp.DataDir, "secret.key")); err != nil {
			t.Fatal(err)
		}

		restored := startControlPlane(t, Options{Dialect: cp.Dialect, DataDir: cp.DataDir, DatabaseURL: cp.DatabaseURL,
			Env: []string{"CAPSTAN_SECRET_KEY=" + kit.SecretKey}})
		signIn(t, restored, admin.Email, admin.Password, admin.TOTPSecret)
		if _, err := os.Stat(filepath.Join(cp.DataDir, "secret.key")); !os.IsNotExist(err) {
			t.Fatalf("secret.key after a start with CAPSTAN_SECRET_KEY: %v, want none", err)
		}
	})
}

// TestRecoveryKitParallelWrongPasswords: wrong passwords sent at once to the
// recovery-kit endpoint in one session get the burst's worth of password
// checks (each one audited as refused), the rest 429 with Retry-After. The
// throttle is the session's: the right password in that session waits too,
// from any address, while a new sign-in gets the kit at once.
func TestRecoveryKitParallelWrongPasswords(t *testing.T) {
	t.Parallel()
	forEachControlPlane(t, func(t *testing.T, cp *ControlPlane) {
		admin := newAdmin(t, cp, "admin@example.com")
		s := signInUser(t, cp, admin)
		attacker := clientAt(t, "127.0.0.1")

		const n = 50
		var got statusCounts
		testlab.InParallel(n, func(i int) {
			got.add(postFrom(cp, attacker, "/api/v1/platform/recovery-kit", s.AccessToken,
				map[string]string{"password": "wrong password " + strconv.Itoa(i)}))
		})
		counts := got.check(t)
		refused := auditEntries(t, cp, s.AccessToken, "platform.recovery_kit.refused")
		t.Logf("%s: password checks for %d parallel wrong recovery-kit passwords: %d", cp.Dialect, n, len(refused))
		if got, want := counts["403 wrong-password"], auth.ClientBurst; got != want {
			t.Fatalf("wrong-password among %d parallel requests: got %d, want %d (all: %v)", n, got, want, counts)
		}
		if got, want := counts["429 too-many-attempts"], n-auth.ClientBurst; got != want {
			t.Fatalf("too-many-attempts among %d parallel requests: got %d, want %d (all: %v)", n, got, want, counts)
		}
		if got, want := len(refused), auth.ClientBurst; got != want {
			t.Fatalf("platform.recovery_kit.refused entries: got %d, want %d", got, want)
		}

		r := mustPostFrom(t, cp, attacker, "/api/v1/platform/recovery-kit", s.AccessToken, map[string]string{"password": admin.Password})
		expectProblem(t, r, http.StatusTooManyRequests, "too-many-attempts")
		r = mustPostFrom(t, cp, clientAt(t, "127.0.0.2"), "/api/v1/platform/recovery-kit", s.AccessToken, map[string]string{"password": admin.Password})
		expectProblem(t, r, http.StatusTooManyRequests, "too-many-attempts")
		fresh := signInUser(t, cp, admin)
		r = mustPostFrom(t, cp, attacker, "/api/v1/platform/recovery-kit", fresh.AccessToken, map[string]string{"password": admin.Password})
		expectStatus(t, r, http.StatusOK)
	})
}

// TestRecoveryKitDecryptsInstanceBackups: a backup encrypted to its
// instance's own key is decrypted with the kit alone: capstan
// recovery-kit identity derives the instance's identity from the kit's
// secret key, in age's identity file format.
func TestRecoveryKitDecryptsInstanceBackups(t *testing.T) {
	r := newBackupRig(t, store.SQLite)
	expectStatus(t, r.putSettings(t, r.storageSettings("")), http.StatusOK)
	pg, _ := r.registerPostgres(t, "pg", `CREATE TABLE kept (v text)`, `INSERT INTO kept VALUES ('row kept by the kit')`)
	run, j := r.backup(t, pg.ID, "")
	if run.Status != "succeeded" || run.KeyID != "inst-v1:"+pg.ID {
		t.Fatalf("backup: %s (%s), key_id %q", j.Status, deref(j.Error), run.KeyID)
	}
	resp := r.Post(t, "/api/v1/platform/recovery-kit", r.Token, map[string]string{"password": r.Admin.Password})
	expectStatus(t, resp, http.StatusOK)
	kitFile := filepath.Join(t.TempDir(), "kit.age")
	if err := os.WriteFile(kitFile, resp.Body, 0o600); err != nil {
		t.Fatal(err)
	}
	// Only the kit: no data dir, no store.
	env := childEnv(nil)
	for _, args := range [][]string{{"--key-id", run.KeyID}, {"--instance", pg.ID}} {
		res := runCLI(t, env, r.Admin.Password+"\n", append([]string{"recovery-kit", "identity", "--file", kitFile}, args...)...)
		if res.ExitCode != 0 {
			t.Fatalf("recovery-kit identity %v: exit %d: %s", args, res.ExitCode, res.Stderr)
		}
		ids, err := age.ParseIdentities(strings.NewReader(res.Stdout))
		if err != nil {
			t.Fatalf("recovery-kit identity %v printed no identity file: %v\n%s", args, err, res.Stdout)
		}
		dec, err := age.Decrypt(bytes.NewReader(r.s3.Object(t, run.Locations.Remote)), ids...)
		if err != nil {
			t.Fatalf("decrypting the backup with the kit's identity: %v", err)
		}
		gz, err := gzip.NewReader(dec)
		if err != nil {
			t.Fatal(err)
		}
		dump, err := io.ReadAll(gz)
		if err != nil || !bytes.Contains(dump, []byte("row kept by the kit")) {
			t.Fatalf("the decrypted backup (%d bytes, %v) does not hold the table's row", len(dump), err)
		}
	}
	res := runCLI(t, env, "not the password\n", "recovery-kit", "identity", "--file", kitFile, "--instance", pg.ID)
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "AGE-SECRET-KEY-1") {
		t.Fatalf("recovery-kit identity with a wrong password: exit %d, printed %q", res.ExitCode, res.Stdout)
	}
}

package testlab

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// Webhook deliveries of the GitHost stand-in, shaped and signed as GitHub
// sends them: a JSON body, X-GitHub-Event, X-GitHub-Delivery (a GUID) and
// X-Hub-Signature-256 (sha256= and the HMAC-SHA256 of the body with the
// app's webhook secret, in hex).

// Sign returns the X-Hub-Signature-256 of body with the app's webhook
// secret.
func (g *GitHost) Sign(body []byte) string {
	mac := hmac.New(sha256.New, []byte(g.WebhookSecret()))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// DeliveryID returns a new delivery id, a GUID as GitHub's.
func DeliveryID() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// PushEvent is the payload of a push of sha (after before) to branch of
// repo, delivered to installation.
func (g *GitHost) PushEvent(installation int64, repo *HostedRepo, branch, before, sha string) []byte {
	g.mu.Lock()
	rj := g.repoJSON(repo)
	c := repo.Commits[sha]
	g.mu.Unlock()
	commit := map[string]any{"id": sha, "tree_id": sha, "distinct": true, "message": c.Message,
		"timestamp": time.Now().UTC().Format(time.RFC3339), "url": g.URL + "/" + repo.FullName() + "/commit/" + sha,
		"author":    map[string]any{"name": c.AuthorName, "email": c.AuthorEmail},
		"committer": map[string]any{"name": c.AuthorName, "email": c.AuthorEmail},
		"added":     []string{}, "removed": []string{}, "modified": []string{}}
	b, _ := json.Marshal(map[string]any{
		"ref": "refs/heads/" + branch, "before": before, "after": sha, "created": false, "deleted": false, "forced": false,
		"base_ref": nil, "compare": g.URL + "/" + repo.FullName() + "/compare/" + before[:12] + "..." + sha[:12],
		"commits": []any{commit}, "head_commit": commit, "repository": rj,
		"pusher":       map[string]any{"name": "ada", "email": "ada@example.com"},
		"sender":       g.account("ada", "User"),
		"installation": map[string]any{"id": installation, "node_id": "MDIz"},
	})
	return b
}

// InstallationEvent is the payload of an installation event (action
// created, deleted, suspend…) of an installation made by Install.
func (g *GitHost) InstallationEvent(action string, installation int64) []byte {
	g.mu.Lock()
	in := g.installations[installation]
	var body []byte
	if in != nil && g.app != nil {
		body, _ = json.Marshal(map[string]any{"action": action, "installation": g.installationJSON(g.app, in),
			"repositories": []any{}, "sender": g.account("ada", "User")})
	}
	g.mu.Unlock()
	return body
}

// Deliver posts a delivery to url as GitHub does, signed with signature
// ("" signs it with the app's secret), and returns the status and body of
// the answer.
func (g *GitHost) Deliver(t testing.TB, url, event, delivery string, body []byte, signature string) (int, []byte) {
	t.Helper()
	if signature == "" {
		signature = g.Sign(body)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/5a3b2c1")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-GitHub-Hook-ID", "424242")
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	req.Header.Set("X-Hub-Signature-256", signature)
	hc := &http.Client{Timeout: 60 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("delivering %s to %s: %v", event, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A build context that is a symbolic link out of the checkout is refused
// before the engine sees anything; so is a compose file's context that
// climbs out of it.
func TestComposeBuildContextStaysInTheCheckout(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "src")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "site"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "Dockerfile"), []byte("FROM scratch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	d := New(Options{})
	res := &agentproto.BuildResult{}
	// No engine client: the checks come first.
	_, err := d.buildFrom(context.Background(), nil, "app_x", strings.Repeat("a", 40), repo, "link", "", "capstan/x-web:aaaa", buildInputs{}, res, &recorder{})
	if err == nil || !strings.Contains(err.Error(), `build context "link": leads outside the repository`) {
		t.Fatalf("a context linking out of the checkout: %v", err)
	}
	_, err = d.buildFrom(context.Background(), nil, "app_x", strings.Repeat("a", 40), repo, "site", "", "capstan/x-web:aaaa", buildInputs{}, res, &recorder{})
	if err == nil || !strings.Contains(err.Error(), "has no Dockerfile at Dockerfile") {
		t.Fatalf("a context without its Dockerfile: %v", err)
	}
	if err := os.Symlink(filepath.Join(outside, "Dockerfile"), filepath.Join(repo, "site", "Dockerfile")); err != nil {
		t.Fatal(err)
	}
	_, err = d.buildFrom(context.Background(), nil, "app_x", strings.Repeat("a", 40), repo, "site", "", "capstan/x-web:aaaa", buildInputs{}, res, &recorder{})
	if err == nil || !strings.Contains(err.Error(), "has no Dockerfile at Dockerfile") {
		t.Fatalf("a Dockerfile linking out of the checkout: %v", err)
	}

	// A compose file below the root: its services' contexts are relative
	// to its directory, and may not leave the repository.
	co := &composeCheckout{repo: repo, file: "deploy/compose.yaml", build: res}
	p := agentproto.DeployPayload{AppID: "app_x", Image: "capstan/x:aaaa", Build: &agentproto.BuildSpec{Commit: strings.Repeat("a", 40)}}
	for _, ctx := range []string{"../..", "../../elsewhere"} {
		ps := &plannedService{name: "web"}
		ps.svc.Build = &types.BuildConfig{Context: ctx}
		if _, err := d.buildService(context.Background(), nil, p, co, ps, &recorder{}); err == nil || !strings.Contains(err.Error(), "leads outside the repository") {
			t.Errorf("context %s of deploy/compose.yaml: %v", ctx, err)
		}
	}
	if got := serviceImageTag("capstan/x:0123456789ab", "web"); got != "capstan/x-web:0123456789ab" {
		t.Errorf("tag %s", got)
	}
}

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestComposeImagesPruned deploys a compose application of a web service
// and a worker eight times through the real agent and Docker: after a
// successful deploy, the images of the releases no longer kept (past the
// last five succeeded) are removed, never an image of a kept release
// (the worker's, the same in every release) nor one a container still
// uses.
func TestComposeImagesPruned(t *testing.T) {
	t.Parallel()
	versions := map[string]int{"worker": 0}
	for i := 1; i <= 8; i++ {
		versions[fmt.Sprintf("v%d", i)] = 0
	}
	s := newAppStack(t, appStackOptions{Images: versions})
	img := func(i int) webImage { return s.Images[fmt.Sprintf("v%d", i)] }
	doc := func(i int) string {
		return fmt.Sprintf("services:\n  web:\n    image: %s\n    expose: [\"8080\"]\n  worker:\n    image: %s\n", img(i).Ref, s.Images["worker"].Ref)
	}
	app := s.createApp(t, map[string]any{"name": "pruner", "kind": "compose", "source": map[string]any{"type": "inline"},
		"compose": doc(1), "web_service": "web", "container_port": 8080, "health_path": "/health"})
	t.Cleanup(func() { (&composeStack{appStack: s}).removeCompose(t, app.ID) })
	s.waitDeployment(t, app.Latest.ID, "succeeded", pollInterval, deployTimeout)
	present := func(id string) bool {
		_, err := s.Docker.ImageInspect(t.Context(), id)
		return err == nil
	}
	deploy := func(i int) AppDeployment {
		t.Helper()
		resp := s.Do(t, Req{Method: http.MethodPatch, Path: "/api/v1/applications/" + app.ID, Token: s.Token, JSON: map[string]any{"compose": doc(i)}})
		expectStatus(t, resp, http.StatusOK)
		d, _ := s.waitDeployment(t, s.deploy(t, app.ID, nil), "succeeded", pollInterval, deployTimeout)
		if d.ImageID != img(i).ID {
			t.Fatalf("deployment %d's web service ran image %s, want %s", i, d.ImageID, img(i).ID)
		}
		return d
	}
	for i := 2; i <= 6; i++ {
		if d := deploy(i); d.Result == nil || len(d.Result.PrunedImageIDs) != 0 {
			t.Fatalf("deployment %d pruned %+v with at most five releases", i, d.Result)
		}
	}
	// The seventh: v1's release fell out of the last five.
	d := deploy(7)
	if d.Result == nil || !slices.Equal(d.Result.PrunedImageIDs, []string{img(1).ID}) {
		t.Fatalf("the seventh deployment pruned %+v, want v1's image %s; events:\n%s", d.Result, img(1).ID, eventsText(d.Events))
	}
	if present(img(1).ID) {
		t.Errorf("v1's image is still on the engine after its release fell out of the last five")
	}
	for i := 2; i <= 7; i++ {
		if !present(img(i).ID) {
			t.Errorf("v%d's image, of a kept release, was pruned", i)
		}
	}
	if !present(s.Images["worker"].ID) {
		t.Errorf("the worker's image, in every kept release, was pruned")
	}

	// v2's release falls out next, but a container (of no application)
	// uses its image: it stays.
	user := createStoppedContainer(t, s.Docker, img(2).ID)
	d = deploy(8)
	if d.Result == nil || len(d.Result.PrunedImageIDs) != 0 {
		t.Fatalf("the eighth deployment pruned %+v, want nothing (v2's image is used by %s)", d.Result, user)
	}
	if _, ok := findEvent(d.Events, "keeping image "+strings.TrimPrefix(img(2).ID, "sha256:")[:12]+": a container still uses it"); !ok {
		t.Errorf("no event says v2's image is kept for its container; events:\n%s", eventsText(d.Events))
	}
	if !present(img(2).ID) || !present(s.Images["worker"].ID) {
		t.Errorf("an image a container or a kept release uses was pruned")
	}
}

// createStoppedContainer creates a container of image (not started),
// removed when the test ends; it returns its name.
func createStoppedContainer(t *testing.T, cli *client.Client, image string) string {
	t.Helper()
	return testlab.CreateContainer(t, cli, client.ContainerCreateOptions{Config: &container.Config{Image: image}})
}

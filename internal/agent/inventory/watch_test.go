package inventory

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// fakeEvents is an eventsAPI whose streams the test feeds and ends.
type fakeEvents struct {
	host    string
	refuse  atomic.Bool // Events fails as an engine that is down
	mu      sync.Mutex
	opens   int
	streams chan fakeStream // each open stream, for the test
	closed  atomic.Bool
}

type fakeStream struct {
	msgs chan events.Message
	errs chan error
}

func (f *fakeEvents) Events(ctx context.Context, o client.EventsListOptions) client.EventsResult {
	f.mu.Lock()
	f.opens++
	f.mu.Unlock()
	s := fakeStream{msgs: make(chan events.Message), errs: make(chan error, 1)}
	if f.refuse.Load() {
		s.errs <- errors.New("Cannot connect to the Docker daemon")
		return client.EventsResult{Messages: s.msgs, Err: s.errs}
	}
	select {
	case f.streams <- s:
	case <-ctx.Done():
		s.errs <- ctx.Err()
	}
	return client.EventsResult{Messages: s.msgs, Err: s.errs}
}

func (f *fakeEvents) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens
}

func (f *fakeEvents) DaemonHost() string { return f.host }
func (f *fakeEvents) Close() error       { f.closed.Store(true); return nil }

// counter counts calls of changed.
type counter struct{ n atomic.Int64 }

func (c *counter) changed()   { c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }

// TestWatchEvents: an open stream counts as a change, inventory events
// count, executions do not; a broken stream is opened again, after a
// delay when opening fails; the client is closed at the end.
func TestWatchEvents(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	writeFile(t, sock, "")
	fake := &fakeEvents{host: "unix://" + sock, streams: make(chan fakeStream)}
	var c counter
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchEvents(ctx, func() (eventsAPI, error) { return fake, nil }, c.changed)
	}()
	s := <-fake.streams
	testlab.Eventually(t, 5*time.Second, "the open stream counted as a change", func() bool { return c.get() == 1 })
	s.msgs <- events.Message{Type: events.ContainerEventType, Action: events.ActionExecStart}
	s.msgs <- events.Message{Type: events.ContainerEventType, Action: events.ActionStart}
	s.msgs <- events.Message{Type: events.ContainerEventType, Action: events.ActionHealthStatusHealthy}
	s.msgs <- events.Message{Type: events.ImageEventType, Action: events.ActionPull}
	testlab.Eventually(t, 5*time.Second, "three changes more", func() bool { return c.get() == 4 })

	// The engine goes away: the stream ends, opening fails for a while,
	// and the watcher tries again with growing delays.
	fake.refuse.Store(true)
	began := time.Now()
	s.errs <- errors.New("unexpected EOF")
	testlab.Eventually(t, 20*time.Second, "two failed attempts", func() bool { return fake.openCount() >= 3 })
	// Retries after about 0.5–1, then 1–2 s: not in a tight loop.
	if took := time.Since(began); took < 1400*time.Millisecond {
		t.Errorf("two attempts within %s: no backoff", took)
	}
	if got := c.get(); got != 4 {
		t.Errorf("failed attempts counted as %d changes", got-4)
	}
	// The engine is back: the new stream counts as a change.
	fake.refuse.Store(false)
	s = <-fake.streams
	testlab.Eventually(t, 5*time.Second, "the reopened stream counted as a change", func() bool { return c.get() == 5 })
	s.msgs <- events.Message{Type: events.VolumeEventType, Action: events.ActionCreate}
	testlab.Eventually(t, 5*time.Second, "a volume change", func() bool { return c.get() == 6 })

	cancel()
	<-done
	if !fake.closed.Load() {
		t.Error("the client was not closed")
	}
}

// TestWatchWithoutDocker: no socket, no stream and no change, until ctx
// ends.
func TestWatchWithoutDocker(t *testing.T) {
	fake := &fakeEvents{host: "unix://" + filepath.Join(t.TempDir(), "none.sock"), streams: make(chan fakeStream)}
	var c counter
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	watchEvents(ctx, func() (eventsAPI, error) { return fake, nil }, c.changed)
	if fake.openCount() != 0 || c.get() != 0 {
		t.Errorf("without a socket: %d streams opened, %d changes", fake.openCount(), c.get())
	}
}

// TestWatchOnThisHost follows the real engine: a container created and
// started outside the collector is told of within seconds.
func TestWatchOnThisHost(t *testing.T) {
	cli := testlab.Docker(t)
	if h := testlab.DockerHost(); h != "" {
		t.Setenv("DOCKER_HOST", h)
	}
	image := testlab.ProgramImage(t, cli, testlab.UniqueName("capstan-inventory-test:"), "./testdata/sleeper").Ref
	col := New("/")
	defer col.Close()
	var c counter
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		col.Watch(ctx, c.changed)
	}()
	testlab.Eventually(t, 10*time.Second, "the stream opened", func() bool { return c.get() >= 1 })
	before := c.get()
	began := time.Now()
	name := testlab.CreateContainer(t, cli, client.ContainerCreateOptions{Config: &container.Config{Image: image}})
	testlab.StartContainer(t, cli, name)
	testlab.Eventually(t, 10*time.Second, "the container's events", func() bool { return c.get() >= before+2 })
	t.Logf("create and start told of after %s", time.Since(began).Round(time.Millisecond))
	cancel()
	<-done
}

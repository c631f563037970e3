package inventory

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent/dockerc"
)

// Delays between two attempts to follow the engine's events: doubling
// from watchRetryMin to watchRetryMax while they fail (the engine is down
// or restarting), with jitter.
const (
	watchRetryMin = time.Second
	watchRetryMax = 30 * time.Second
	// openGrace is how long a new stream must stay up without an error
	// to count as open.
	openGrace = 200 * time.Millisecond
)

// eventsAPI is what the event watcher uses of the Engine API client.
type eventsAPI interface {
	Events(ctx context.Context, options client.EventsListOptions) client.EventsResult
	DaemonHost() string
	Close() error
}

// Watch follows the Docker engine's event stream until ctx ends and calls
// changed after every event that may change the inventory (a container,
// image, volume or network created, started, stopped, removed…), and
// each time the stream is (re)opened, since anything may have changed
// while it was not followed. When the engine cannot be reached or the
// stream breaks (the engine restarts), it tries again after a delay that
// doubles up to 30 s. It has its own connection to the engine, so it may
// run next to Collect; changed must not block.
func (c *Collector) Watch(ctx context.Context, changed func()) {
	newClient := func() (eventsAPI, error) { return dockerc.New("") }
	if c.containers.newEventsClient != nil {
		newClient = c.containers.newEventsClient
	}
	watchEvents(ctx, newClient, changed)
}

func watchEvents(ctx context.Context, newClient func() (eventsAPI, error), changed func()) {
	var cli eventsAPI
	defer func() {
		if cli != nil {
			_ = cli.Close()
		}
	}()
	failures := 0
	for ctx.Err() == nil {
		if cli == nil {
			c, err := newClient()
			if err == nil {
				cli = c
			}
		}
		if cli != nil && followEvents(ctx, cli, changed) {
			failures = 0
		}
		if ctx.Err() != nil {
			return
		}
		d := watchRetryMin << min(failures, 5)
		d = min(d, watchRetryMax)
		failures++
		// Half fixed, half random: engines restarted together are not
		// all asked again at the same instant.
		d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// followEvents reads one event stream until it ends; it reports whether
// the stream was opened (and so whether the engine answered).
func followEvents(ctx context.Context, cli eventsAPI, changed func()) bool {
	if sock, ok := strings.CutPrefix(cli.DaemonHost(), "unix://"); ok {
		if _, err := os.Stat(sock); errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := client.Filters{}.Add("type",
		string(events.ContainerEventType), string(events.ImageEventType),
		string(events.VolumeEventType), string(events.NetworkEventType))
	res := cli.Events(sctx, client.EventsListOptions{Filters: f})
	// The client returns once the engine answered or failed; a failure
	// to connect arrives on Err right after. The stream counts as open
	// when an event arrives or no error did within openGrace.
	open := false
	grace := time.NewTimer(openGrace)
	defer grace.Stop()
	opened := func() {
		if !open {
			open = true
			changed()
		}
	}
	for {
		select {
		case <-grace.C:
			opened()
		case m := <-res.Messages:
			opened()
			if inventoryEvent(m) {
				changed()
			}
		case <-res.Err:
			return open
		case <-ctx.Done():
			return open
		}
	}
}

// inventoryEvent reports whether an event may change what the inventory
// says; executions in a container, attaches, copies and the like do not.
func inventoryEvent(m events.Message) bool {
	a := string(m.Action)
	for _, p := range []string{"exec_", "attach", "detach", "resize", "top", "archive-path", "extract-to-dir", "export", "copy", "commit"} {
		if strings.HasPrefix(a, p) {
			return false
		}
	}
	return true
}

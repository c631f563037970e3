package agent

import (
	"cmp"
	"context"
	"net/http"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/inventory"
	"github.com/capstan-dev/capstan/internal/agent/metrics"
)

// metricsInterval is the time between two samples: metrics_seconds.
func (a *Agent) metricsInterval() time.Duration {
	if a.opts.metricsInterval > 0 {
		return a.opts.metricsInterval
	}
	return time.Duration(a.Settings().MetricsSeconds) * time.Second
}

// sampleLoop takes a sample every metrics_seconds into buf, which keeps an
// hour of them (the newest) while the control plane cannot be reached.
func (a *Agent) sampleLoop(ctx context.Context, buf *metrics.Buffer) {
	sampler, stats := a.opts.Sampler, a.opts.ContainerStats
	if sampler == nil {
		sampler = metrics.NewSampler("/", time.Now())
		if stats == nil {
			cs := inventory.NewContainerStats()
			defer cs.Close()
			stats = cs
		}
	}
	// The first sample's CPU and network rates span a whole interval.
	if !Sleep(ctx, a.metricsInterval()) {
		return
	}
	var (
		lastErr      string
		lastStatsErr string
		full         bool
		b            = a.opts.Backoff
	)
	RunLoop(ctx, a.log, "metrics sample", &b, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		s, err := sampler.Sample(start)
		switch {
		case err != nil && err.Error() != lastErr:
			a.log.Warn("some metrics could not be read; they are left out of the samples (0)", "err", err)
			lastErr = err.Error()
		case err == nil && lastErr != "":
			a.log.Info("all metrics can be read again")
			lastErr = ""
		}
		if stats != nil {
			var serr error
			s.Containers, serr = stats.Sample(ctx)
			if ctx.Err() != nil {
				return 0, nil
			}
			switch {
			case serr != nil && serr.Error() != lastStatsErr:
				a.log.Warn("some container stats could not be read; those containers are left out of the samples", "err", serr)
				lastStatsErr = serr.Error()
			case serr == nil && lastStatsErr != "":
				a.log.Info("all container stats can be read again")
				lastStatsErr = ""
			}
		}
		evicted := buf.Push(s)
		a.pending.saveMetrics(buf)
		if evicted {
			if !full {
				a.log.Warn("metrics buffer is full; dropping the oldest samples until the control plane takes them",
					"buffered", buf.Cap())
				full = true
			}
		} else {
			full = false
		}
		interval := a.metricsInterval()
		// A longer interval shrinks the buffer, but not below what it
		// holds: samples of an outage are not dropped for it.
		buf.SetCapacity(max(metrics.BufferCapacity(interval), buf.Len()))
		return interval - time.Since(start), nil
	})
}

// metricsSendLoop delivers the buffered samples, oldest first, as soon as
// they are taken; after an outage the backlog goes in batches.
func (a *Agent) metricsSendLoop(ctx context.Context, buf *metrics.Buffer) {
	sender := metrics.NewSender(buf, a.client.PostMetrics, StatusOf, a.log)
	b := a.opts.Backoff
	RunLoop(ctx, a.log, "metrics report", &b, func(ctx context.Context) (time.Duration, error) {
		if buf.Len() == 0 {
			select {
			case <-buf.Ready():
			case <-ctx.Done():
			}
			return 0, nil
		}
		n, err := sender.Send(ctx)
		if n > 0 {
			a.pending.saveMetrics(buf)
		}
		return 0, err
	})
}

// inventoryLoop collects the inventory every InventoryCheckInterval and
// sends it at start, whenever it differs from the one last sent
// (inventory.Hash), and every InventoryRefreshInterval regardless. A
// collector that is an InventoryWatcher also has it collected again soon
// after each change it tells of (InventoryDebounce), rather than at the
// next check.
func (a *Agent) inventoryLoop(ctx context.Context) {
	col := a.opts.Inventory
	if col == nil {
		c := inventory.New("/")
		defer c.Close()
		col = c
	}
	check := cmp.Or(a.opts.inventoryCheck, InventoryCheckInterval)
	refresh := cmp.Or(a.opts.inventoryRefresh, InventoryRefreshInterval)
	changes := make(chan struct{}, 1)
	if w, ok := col.(InventoryWatcher); ok {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Watch(wctx, func() {
				select {
				case changes <- struct{}{}:
				default:
				}
			})
		}()
		defer func() { cancel(); <-done }()
	}
	debounce := cmp.Or(a.opts.inventoryDebounce, InventoryDebounce)
	// wait waits for the next check, or for a change and then until none
	// followed it for debounce (at most 5 debounces after the first).
	wait := func(ctx context.Context) {
		t := time.NewTimer(check)
		defer t.Stop()
		select {
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-changes:
		}
		quiet := time.NewTimer(debounce)
		defer quiet.Stop()
		limit := time.NewTimer(5 * debounce)
		defer limit.Stop()
		for {
			select {
			case <-quiet.C:
				return
			case <-limit.C:
				return
			case <-ctx.Done():
				return
			case <-changes:
				quiet.Reset(debounce)
			}
		}
	}
	var (
		last    [32]byte
		sentAt  time.Time
		sent    bool
		lastErr string
		b       = a.opts.Backoff
	)
	RunLoop(ctx, a.log, "inventory", &b, func(ctx context.Context) (time.Duration, error) {
		inv, err := col.Collect(ctx)
		if ctx.Err() != nil {
			return 0, nil
		}
		switch {
		case err != nil && err.Error() != lastErr:
			a.log.Warn("part of the inventory could not be read; it is reported as unknown", "err", err)
			lastErr = err.Error()
		case err == nil && lastErr != "":
			a.log.Info("the whole inventory can be read again")
			lastErr = ""
		}
		h := inventory.Hash(inv)
		if sent && h == last && time.Since(sentAt) < refresh {
			wait(ctx)
			return 0, nil
		}
		err = a.client.PostInventory(ctx, inv)
		switch StatusOf(err) {
		case 0:
			if err != nil {
				return 0, err
			}
			level := a.log.Debug
			if !sent {
				level = a.log.Info
			}
			level("inventory sent", "services", len(inv.Services), "containers", len(inv.Containers), "ports", len(inv.Ports),
				"services_known", inv.Services != nil, "containers_known", inv.Containers != nil, "ports_known", inv.Ports != nil)
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			// The same report would be refused again: wait for a change
			// or the refresh.
			a.log.Error("control plane refused the inventory; it is sent again when it changes", "err", err)
		default:
			return 0, err
		}
		last, sentAt, sent = h, time.Now(), true
		wait(ctx)
		return 0, nil
	})
}

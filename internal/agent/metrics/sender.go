package metrics

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// PostFunc delivers a batch of samples to the control plane
// (POST /agent/v1/metrics). A nil error means the control plane stored it.
type PostFunc func(ctx context.Context, samples []agentproto.MetricSample) error

// Sender delivers the samples of a Buffer, oldest first, in batches of at
// most agentproto.MaxMetricSamples and MaxBatchBytes. A batch leaves the
// buffer only once the control plane stored it, or refused it for good so
// that one bad sample cannot hold up every later one. Not safe for
// concurrent use; the metrics send loop owns it.
type Sender struct {
	buf    *Buffer
	post   PostFunc
	status func(error) int
	log    *slog.Logger

	maxSamples int // halved when the control plane says a batch is too large
}

// NewSender returns a sender of buf's samples through post. status returns
// the HTTP status of a post's error, 0 if it has none (a network failure).
func NewSender(buf *Buffer, post PostFunc, status func(error) int, log *slog.Logger) *Sender {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sender{buf: buf, post: post, status: status, log: log, maxSamples: agentproto.MaxMetricSamples}
}

// Send posts the oldest batch, if any, and returns how many samples left
// the buffer. After a 2xx the batch is removed. After 400 or 422, or 413
// for a single sample, it is dropped and the refusal logged; after 413 for
// several samples, later batches are half the size and nothing is dropped.
// Any other failure (network, 5xx, 429, 404 from an older control plane,
// revocation) is returned and the batch stays for the next try.
func (s *Sender) Send(ctx context.Context) (int, error) {
	batch := s.buf.Peek(s.maxSamples, MaxBatchBytes)
	n := len(batch.Samples)
	if n == 0 {
		return 0, nil
	}
	err := s.post(ctx, batch.Samples)
	if err == nil {
		return s.buf.Remove(batch), nil
	}
	switch st := s.status(err); {
	case st == http.StatusRequestEntityTooLarge && n > 1:
		s.maxSamples = max(n/2, 1)
		s.log.Warn("control plane says the metrics batch is too large; sending smaller batches",
			"samples", n, "batch_limit", s.maxSamples, "err", err)
		return 0, nil
	case st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge || st == http.StatusUnprocessableEntity:
		removed := s.buf.Remove(batch)
		s.log.Error("control plane refused a metrics batch; dropping it", "status", st, "samples", n,
			"from", batch.Samples[0].At, "to", batch.Samples[n-1].At, "err", err)
		return removed, nil
	}
	return 0, err
}

package jobs

import "sync"

// Change is a change of a job made through this service, for watchers:
// the job as it now is, and the progress events just stored (none when
// only its state changed). The job is as an administrator reads it; a
// watcher that shows it to members passes it through For.
type Change struct {
	Job    Job
	Events []Event
}

// watchers are told of every change of a job made through this process.
type watchers struct {
	mu  sync.RWMutex // guards fns
	fns []func(Change)
}

// Watch registers fn to be told of every change of a job made through
// this service: queued, claimed, progress events, finished (after its
// completion hook ran, so what the job finished already says so),
// cancelled and expired. fn runs on the caller's goroutine and must not
// block.
func (s *Service) Watch(fn func(Change)) {
	s.watch.mu.Lock()
	s.watch.fns = append(s.watch.fns, fn)
	s.watch.mu.Unlock()
}

func (s *Service) changed(c Change) {
	s.watch.mu.RLock()
	fns := s.watch.fns
	s.watch.mu.RUnlock()
	for _, fn := range fns {
		fn(c)
	}
}

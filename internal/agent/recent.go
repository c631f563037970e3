package agent

import (
	"container/list"
	"sync"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Bounds of the memory of started jobs.
const (
	// RecentJobs is how many job ids the agent remembers having started.
	RecentJobs = 10000
	// recentResultBytes bounds the results kept to re-complete a job that
	// is delivered again; the oldest results are forgotten first (the ids
	// are still remembered).
	recentResultBytes = 1 << 20
)

// recentJobs is a bounded LRU set of the job ids started by this process,
// with the result of finished ones while they fit the byte budget. It makes
// sure a job id is never executed twice.
type recentJobs struct {
	mu          sync.Mutex
	max         int
	budget      int
	resultBytes int
	ll          *list.List // of *recentJob, front = most recent
	byID        map[string]*list.Element
}

type recentJob struct {
	id     string
	done   bool
	result *agentproto.CompleteRequest
	size   int
}

func newRecentJobs(max, budget int) *recentJobs {
	return &recentJobs{max: max, budget: budget, ll: list.New(), byID: map[string]*list.Element{}}
}

// begin records id as started. It returns seen=false the first time; for an
// id seen before it returns seen=true and, if the job finished and its
// result is still kept, that result.
func (r *recentJobs) begin(id string) (seen bool, result *agentproto.CompleteRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.byID[id]; ok {
		r.ll.MoveToFront(e)
		j := e.Value.(*recentJob)
		return true, j.result
	}
	r.byID[id] = r.ll.PushFront(&recentJob{id: id})
	for r.ll.Len() > r.max {
		j := r.ll.Remove(r.ll.Back()).(*recentJob)
		r.resultBytes -= j.size
		delete(r.byID, j.id)
	}
	return false, nil
}

// finish records the result of id (nil: the job is not to be completed).
func (r *recentJobs) finish(id string, res *agentproto.CompleteRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.byID[id]
	if !ok {
		return
	}
	j := e.Value.(*recentJob)
	j.done = true
	if res == nil {
		return
	}
	size := len(res.Error) + len(res.Data) + len(res.Output) + 64
	if size > r.budget {
		return
	}
	r.resultBytes += size - j.size
	j.result, j.size = res, size
	for b := r.ll.Back(); r.resultBytes > r.budget && b != nil; b = b.Prev() {
		if old := b.Value.(*recentJob); old.result != nil && old != j {
			r.resultBytes -= old.size
			old.result, old.size = nil, 0
		}
	}
}

func (r *recentJobs) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ll.Len()
}

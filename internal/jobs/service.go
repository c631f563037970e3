package jobs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Listing limits.
const (
	DefaultListLimit = 30
	MaxListLimit     = 100
)

// Service runs the job queue.
type Service struct {
	store Store
	key   *secrets.Key
	now   func() time.Time
	log   *slog.Logger
	wake  *notifier // queued jobs, by server id
	// ends wakes the readers waiting for a job to end, by job id and by
	// serverEndKey (every job of a revoked or deleted server).
	ends   *notifier
	lease  time.Duration
	specMu sync.RWMutex // guards specs
	specs  map[string]Spec

	inflightMu sync.Mutex // guards inflight
	inflight   map[string]struct{}

	stopClaims     chan struct{} // closed by StopClaims
	stopClaimsOnce sync.Once

	// ended holds the servers whose jobs were ended (revoked or deleted),
	// so their waiting claims answer at once.
	ended sync.Map // server id → struct{}

	watch watchers

	// bus tells the other control planes sharing the store about queued
	// and ended jobs; nil: this is the only one.
	bus Bus
}

// Bus carries messages between the control planes that share a store;
// each one's messages reach every one, the sender included, through
// Deliver.
type Bus interface {
	Notify(ctx context.Context, msg string) error
}

// Messages on the bus: a kind, a colon, a key.
const (
	msgQueued      = "job-queued:"   // key: server id
	msgEnded       = "job-ended:"    // key: job id
	msgServerEnded = "server-ended:" // key: server id
)

// publish sends a message to the other control planes; a failure is
// logged: their waits then end at their deadline instead of at once.
func (s *Service) publish(ctx context.Context, kind, key string) {
	if s.bus == nil {
		return
	}
	if err := s.bus.Notify(context.WithoutCancel(ctx), kind+key); err != nil {
		s.log.WarnContext(ctx, "telling the other control planes", "message", kind, "err", err.Error())
	}
}

// Deliver takes a message from the bus, sent by this control plane or
// another, and wakes the claims and readers it concerns. It reports
// whether the message was one of the job service's.
func (s *Service) Deliver(msg string) bool {
	switch {
	case strings.HasPrefix(msg, msgQueued):
		s.wake.notify(strings.TrimPrefix(msg, msgQueued))
	case strings.HasPrefix(msg, msgEnded):
		s.ends.notify(strings.TrimPrefix(msg, msgEnded))
	case strings.HasPrefix(msg, msgServerEnded):
		id := strings.TrimPrefix(msg, msgServerEnded)
		s.ended.Store(id, struct{}{})
		s.wake.notify(id)
		s.ends.notify(serverEndKey(id))
	default:
		return false
	}
	return true
}

// WakeAll wakes every waiting claim and reader to look at the store
// again: the bus reconnected, and messages sent while it was down are
// lost.
func (s *Service) WakeAll() {
	s.wake.notifyAll()
	s.ends.notifyAll()
}

// ErrServerEnded is returned by Claim when the server was revoked while
// its agent waited.
var ErrServerEnded = fault.Unauthenticatedf("agent-revoked", "This server's agent credential was revoked. The agent must stop.")

// CompletionHook runs after a job of its type finished (succeeded, failed or
// cancelled), for the owning capability to update its own records.
type CompletionHook func(ctx context.Context, j Job) error

// Deps is what a job service is made of.
type Deps struct {
	Store Store
	// Key seals the jobs' secrets.
	Key *secrets.Key
	Now func() time.Time
	Log *slog.Logger
	// Bus, when not nil, tells the other control planes sharing the store
	// about queued and ended jobs: their waiting claims and readers are
	// woken at once (see Deliver). nil: this is the only control plane.
	Bus Bus
}

// NewService returns a job service.
func NewService(d Deps) *Service {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Service{store: d.Store, key: d.Key, now: d.Now, log: d.Log, bus: d.Bus, wake: newNotifier(), ends: newNotifier(), lease: DefaultLease,
		specs: map[string]Spec{}, inflight: map[string]struct{}{}, stopClaims: make(chan struct{})}
}

// StopClaims ends the claims that wait for a job at once, with no job, and
// makes later claims return without waiting. The server calls it when it
// shuts down: a waiting claim would otherwise hold the shutdown up for its
// whole wait.
func (s *Service) StopClaims() {
	s.stopClaimsOnce.Do(func() {
		close(s.stopClaims)
		s.wake.notifyAll() // the waits held by WaitQueued
	})
}

// ClaimsStopped reports whether StopClaims was called: a waiting claim
// answers at once, with no job.
func (s *Service) ClaimsStopped() bool {
	select {
	case <-s.stopClaims:
		return true
	default:
		return false
	}
}

// NewJob describes a job to enqueue.
type NewJob struct {
	// ID, when set, is the job's id, made with NewID: a caller that must
	// store a reference to the job before it can finish makes the id
	// first. Empty: Enqueue makes one.
	ID       string
	ServerID string
	// Work is the job's type and payload (made with Of); the payload is
	// marshalled to JSON and must not hold secrets.
	Work Work
	// Secrets are sealed at rest and only handed to the agent holding the job.
	Secrets        map[string]string
	IdempotencyKey string
	CreatedBy      string
	// AppID is the application the job works for, if any.
	AppID string
}

// requireRunner refuses a job type that the server's agent reported it
// does not run, rather than let the agent claim it and fail it. An agent
// that reported no job types (older than the report) is sent any type.
func (s *Service) requireRunner(ctx context.Context, serverID, jobType string) error {
	name, version, types, err := s.store.ServerAgent(ctx, serverID)
	if fault.Is(err, fault.NotFound) {
		return nil // no such server: what queues the job says so
	}
	if err != nil {
		return err
	}
	if types == nil || slices.Contains(types, jobType) {
		return nil
	}
	return fault.Conflictf("agent-upgrade-required",
		"The agent of server %s (version %s) does not run %s jobs; upgrade the agent on the server to the control plane's version, then try again.",
		name, cmp.Or(version, "unknown"), jobType)
}

// NewID returns a new job id, for NewJob.ID.
func NewID(now time.Time) string { return ids.NewAt(ids.Job, now) }

func requestHash(jobType string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(jobType))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

// Enqueue queues a job and wakes the server's waiting claim. With an
// idempotency key that was used before for the same server, it returns the
// first job (created=false) if the request is the same, and a problem if it
// differs or the first request is still being created.
func (s *Service) Enqueue(ctx context.Context, n NewJob) (j Job, created bool, err error) {
	spec, ok := s.Spec(n.Work.jobType)
	if !ok {
		return Job{}, false, fault.Invalidf("type", "unknown job type %q", n.Work.jobType)
	}
	if err := s.requireRunner(ctx, n.ServerID, n.Work.jobType); err != nil {
		return Job{}, false, err
	}
	payload, err := json.Marshal(n.Work.payload)
	if err != nil {
		return Job{}, false, err
	}
	hash := requestHash(n.Work.jobType, payload)
	if n.IdempotencyKey != "" {
		flight := n.ServerID + "\x00" + n.IdempotencyKey
		s.inflightMu.Lock()
		if _, busy := s.inflight[flight]; busy {
			s.inflightMu.Unlock()
			return Job{}, false, fault.Conflictf("idempotency-key-in-flight", "A request with this idempotency key is still being processed.")
		}
		s.inflight[flight] = struct{}{}
		s.inflightMu.Unlock()
		defer func() {
			s.inflightMu.Lock()
			delete(s.inflight, flight)
			s.inflightMu.Unlock()
		}()
		if prev, err := s.store.JobByIdempotencyKey(ctx, n.ServerID, n.IdempotencyKey); err == nil {
			return s.sameRequest(prev, hash)
		} else if !fault.Is(err, fault.NotFound) {
			return Job{}, false, err
		}
	}
	now := s.now().UTC()
	id := n.ID
	if id == "" {
		id = NewID(now)
	}
	queueDeadline := now.Add(spec.QueueTimeout())
	j = Job{
		ID: id, ServerID: n.ServerID, AppID: n.AppID, Type: n.Work.jobType, Status: Queued, Payload: payload,
		HasSecrets: len(n.Secrets) > 0, IdempotencyKey: n.IdempotencyKey, CreatedBy: n.CreatedBy,
		TimeoutSeconds: int(spec.Timeout / time.Second), LeaseSeconds: int(s.lease / time.Second),
		CreatedAt: now, UpdatedAt: now, QueueDeadlineAt: &queueDeadline, RequestHash: hash,
	}
	sealed := ""
	if j.HasSecrets {
		b, err := json.Marshal(n.Secrets)
		if err != nil {
			return Job{}, false, err
		}
		sealed = s.key.Seal("jobs.secrets:"+j.ID, b)
	}
	if err := s.store.InsertJob(ctx, j, sealed); err != nil {
		if fe := fault.As(err); fe != nil && fe.Code == "idempotency-key" {
			// Another replica created it between our read and insert.
			prev, err := s.store.JobByIdempotencyKey(ctx, n.ServerID, n.IdempotencyKey)
			if err != nil {
				return Job{}, false, err
			}
			return s.sameRequest(prev, hash)
		}
		return Job{}, false, err
	}
	s.wake.notify(n.ServerID)
	s.publish(ctx, msgQueued, n.ServerID)
	s.changed(Change{Job: j})
	return j, true, nil
}

func (s *Service) sameRequest(prev Job, hash string) (Job, bool, error) {
	if prev.RequestHash != hash {
		return Job{}, false, &fault.Error{Kind: fault.Invalid, Code: "idempotency-key-reused",
			Message: "This idempotency key was already used for a different request on this server.",
			Fields:  []fault.FieldError{{Field: "idempotency_key", Message: "was used for a different request"}}}
	}
	return prev, false, nil
}

// Get returns a whole job with its events, for the control plane's own
// use. What a caller of the API sees comes from Read.
func (s *Service) Get(ctx context.Context, id string) (Job, []Event, error) {
	j, err := s.store.Job(ctx, id)
	if err != nil {
		return Job{}, nil, err
	}
	ev, err := s.store.JobEvents(ctx, id)
	return j, ev, err
}

// visible is j as readers see it: still running while its completion
// hook has not run (HookPendingAt), so that a job never reads as finished
// before what it finished (an instance, a login, a deployment) says so.
// The mark lives in the store, so every control plane shows the same.
func (s *Service) visible(j Job) Job {
	if !j.Status.Finished() || j.HookPendingAt == nil {
		return j
	}
	j.Status, j.FinishedAt = Running, nil
	j.Error, j.Data, j.Output = nil, nil, nil
	return j
}

// Read returns a job with its events as r may read them.
func (s *Service) Read(ctx context.Context, id string, r Reader) (Job, []Event, error) {
	j, err := s.store.Job(ctx, id)
	if err != nil {
		return Job{}, nil, err
	}
	j = s.visible(j)
	if r != AdminReader {
		// Members see no events: skip reading them.
		return j.For(r), EventsFor(r, nil), nil
	}
	ev, err := s.store.JobEvents(ctx, id)
	return j.For(r), EventsFor(r, ev), err
}

// List returns the jobs f selects, newest first, as r may read them, with
// the names of their servers, applications and creating users.
func (s *Service) List(ctx context.Context, f ListFilter, limit int, r Reader) ([]Job, error) {
	if limit == 0 {
		limit = DefaultListLimit
	}
	var errs fault.Fields
	if limit < 1 || limit > MaxListLimit {
		errs.Add("limit", "must be between 1 and %d", MaxListLimit)
	}
	if f.ServerID != "" && !validID(f.ServerID, ids.Server) {
		errs.Add("server_id", "must be a server id (srv_…)")
	}
	if f.AppID != "" && !validID(f.AppID, "app") {
		errs.Add("app_id", "must be an application id (app_…)")
	}
	if _, ok := s.Spec(f.Type); f.Type != "" && !ok {
		errs.Add("type", "must be a job type, such as app.deploy or logs.read")
	}
	switch f.Status {
	case "", Queued, Running, Succeeded, Failed, Cancelled:
	default:
		errs.Add("status", "must be queued, running, succeeded, failed or cancelled")
	}
	if a := f.Actor; a != "" && a != ActorSystem && !validID(a, ids.User) && (!strings.Contains(a, "@") || len(a) > 254) {
		errs.Add("actor", "must be system, a user id (usr_…) or a user's e-mail address")
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	list, err := s.store.ListJobs(ctx, f, limit)
	for i := range list {
		list[i] = s.visible(list[i]).For(r)
	}
	return list, err
}

// validID reports whether id looks like an identifier with prefix.
func validID(id, prefix string) bool {
	if len(id) > 64 || !strings.HasPrefix(id, prefix+"_") || len(id) == len(prefix)+1 {
		return false
	}
	for _, c := range id[len(prefix)+1:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Named fills in the names of the job's server and application and the
// e-mail of the user who created it, as the list has them.
func (s *Service) Named(ctx context.Context, j Job) (Job, error) {
	server, app, email, err := s.store.JobNames(ctx, j.ServerID, j.AppID, j.CreatedBy)
	if err != nil {
		return j, err
	}
	j.ServerName, j.AppName = server, app
	if j.Actor != nil && j.Actor.Type == ActorUser {
		a := *j.Actor
		a.Email = email
		j.Actor = &a
	}
	return j, nil
}

// MaxWait bounds how long Wait waits.
const MaxWait = 30 * time.Second

// serverEndKey is the ends key of every job of a server.
func serverEndKey(serverID string) string { return "server\x00" + serverID }

// Wait returns the job with its events as r may read them once it is
// finished, or after wait (at most MaxWait) with its state then, or when
// ctx ends. It does not poll: it is woken when a job ends through this
// process or, with a bus (Deps.Bus), through any control plane sharing the
// store (completed by its agent, cancelled, expired, or ended with its
// server).
func (s *Service) Wait(ctx context.Context, id string, wait time.Duration, r Reader) (Job, []Event, error) {
	wait = min(wait, MaxWait)
	if wait <= 0 {
		return s.Read(ctx, id, r)
	}
	j, err := s.store.Job(ctx, id)
	if err != nil {
		return Job{}, nil, err
	}
	// Subscribe before the read that decides to wait, so an end between
	// the two is not missed.
	woken, unsubscribe := s.ends.subscribe(id, serverEndKey(j.ServerID))
	defer unsubscribe()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		j, ev, err := s.Read(ctx, id, r)
		if err != nil || j.Status.Finished() {
			return j, ev, err
		}
		select {
		case <-woken:
		case <-timer.C:
			return s.Read(ctx, id, r)
		case <-ctx.Done():
			return j, ev, nil
		}
	}
}

// Cancel cancels a queued job.
func (s *Service) Cancel(ctx context.Context, id string) (Job, error) {
	j, err := s.store.CancelJob(ctx, id, s.now())
	if err != nil {
		return Job{}, err
	}
	s.runHook(ctx, j)
	j.HookPendingAt = nil
	s.jobEnded(ctx, j.ID)
	s.changed(Change{Job: j})
	return j, nil
}

// jobEnded wakes the readers waiting for the job, here and in the other
// control planes.
func (s *Service) jobEnded(ctx context.Context, id string) {
	s.ends.notify(id)
	s.publish(ctx, msgEnded, id)
}

// Claim waits up to wait for a queued job of the server and moves it to
// running. ok is false when none came in time.
func (s *Service) Claim(ctx context.Context, serverID string, wait time.Duration) (Job, bool, error) {
	woken, unsubscribe := s.wake.subscribe(serverID)
	defer unsubscribe()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if ctx.Err() != nil || s.ClaimsStopped() {
			// The agent hung up (or the server is stopping): a job
			// claimed now would be written to a dead connection and sit
			// running until its lease lapsed.
			return Job{}, false, nil
		}
		j, ok, err := s.store.ClaimJob(ctx, serverID, s.now())
		if ok && err == nil {
			s.changed(Change{Job: j})
		}
		if err != nil || ok {
			return j, ok, err
		}
		select {
		case <-woken:
			if _, ended := s.ended.Load(serverID); ended {
				return Job{}, false, ErrServerEnded
			}
		case <-timer.C:
			return Job{}, false, nil
		case <-ctx.Done():
			return Job{}, false, nil
		case <-s.stopClaims:
			return Job{}, false, nil
		}
	}
}

// WaitQueued calls wake whenever a job may have been queued for serverID:
// queued through this control plane or another one sharing the store, the
// server ended (revoked or deleted), the bus reconnected, or claims
// stopped. It is how a claim waits without a goroutine of its own: wake
// runs on the notifier's goroutine under its lock and must not block
// (nor call back into the service); whoever it wakes calls ClaimNow. The
// returned function ends the subscription.
func (s *Service) WaitQueued(serverID string, wake func()) (stop func()) {
	return s.wake.subscribeFunc(serverID, wake)
}

// ClaimNow moves the oldest queued job of the server to running, if there
// is one, without waiting; ok is false when there is none. It returns
// ErrServerEnded when the server was revoked or deleted through this
// control plane or one sharing its store.
func (s *Service) ClaimNow(ctx context.Context, serverID string) (Job, bool, error) {
	if _, ended := s.ended.Load(serverID); ended {
		return Job{}, false, ErrServerEnded
	}
	j, ok, err := s.store.ClaimJob(ctx, serverID, s.now())
	if ok && err == nil {
		s.changed(Change{Job: j})
	}
	return j, ok, err
}

// owned returns the job if it belongs to serverID.
func (s *Service) owned(ctx context.Context, serverID, jobID string) (Job, error) {
	j, err := s.store.Job(ctx, jobID)
	if err != nil {
		return Job{}, err
	}
	if j.ServerID != serverID {
		return Job{}, fault.Forbiddenf("not-your-job", "This job belongs to another server.")
	}
	return j, nil
}

// Held returns a job of serverID that runs now, for a call its agent
// makes on the job's behalf: another server's job is fault.Forbidden, as
// is one that is not running (queued, or ended, its completion hook run
// or not).
func (s *Service) Held(ctx context.Context, serverID, jobID string) (Job, error) {
	j, err := s.owned(ctx, serverID, jobID)
	if err != nil {
		return Job{}, err
	}
	if j.Status != Running || j.HookPendingAt != nil {
		return Job{}, fault.Forbiddenf("job-not-running", "The job is not running.")
	}
	return j, nil
}

// Secrets returns the secrets of a job to the agent that holds it.
func (s *Service) Secrets(ctx context.Context, serverID, jobID string) (map[string]string, error) {
	j, err := s.owned(ctx, serverID, jobID)
	if err != nil {
		return nil, err
	}
	if j.Status != Running {
		return nil, fault.Forbiddenf("job-not-running", "Secrets are only available while the job runs.")
	}
	// The agent has the job: a lapsed lease fails it from now on.
	if err := s.store.AckJob(ctx, serverID, jobID, s.now()); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if !j.HasSecrets {
		return out, nil
	}
	sealed, err := s.store.JobSecrets(ctx, jobID)
	if err != nil {
		return nil, err
	}
	b, err := s.key.Open("jobs.secrets:"+jobID, sealed)
	if err != nil {
		return nil, err
	}
	return out, json.Unmarshal(b, &out)
}

// Limits on events.
const (
	// LateEventsWindow is how long after a job finished its agent may
	// still add events: a job's clean-up left for after its result (a
	// release removes the old container then) reports on the job.
	LateEventsWindow  = 10 * time.Minute
	MaxEventsPerCall  = 500
	MaxEventMessage   = 4096
	MaxEventDataBytes = 16 << 10
)

// AddEvents stores progress events of a running job and extends its lease;
// a job finished less than LateEventsWindow ago still takes them.
func (s *Service) AddEvents(ctx context.Context, serverID, jobID string, in []agentproto.Event) error {
	var errs fault.Fields
	if len(in) > MaxEventsPerCall {
		errs.Add("events", "at most %d events per call", MaxEventsPerCall)
	}
	evs := make([]Event, 0, len(in))
	now := s.now().UTC()
	for i, e := range in {
		switch e.Level {
		case agentproto.LevelDebug, agentproto.LevelInfo, agentproto.LevelWarn, agentproto.LevelError:
		default:
			errs.Add(fieldIndex("events", i, "level"), "must be debug, info, warn or error")
		}
		if len(e.Message) > MaxEventMessage {
			errs.Add(fieldIndex("events", i, "message"), "at most %d bytes", MaxEventMessage)
		}
		if len(e.Data) > MaxEventDataBytes {
			errs.Add(fieldIndex("events", i, "data"), "at most %d bytes", MaxEventDataBytes)
		}
		at := e.At
		if at.IsZero() {
			at = now
		}
		evs = append(evs, Event{At: at.UTC(), Level: e.Level, Message: e.Message, Data: e.Data})
	}
	if err := errs.Err(); err != nil {
		return err
	}
	j, err := s.owned(ctx, serverID, jobID)
	if err != nil {
		return err
	}
	if j.Status != Running && (!j.Status.Finished() || j.FinishedAt == nil || now.Sub(*j.FinishedAt) > LateEventsWindow) {
		return fault.Conflictf("job-not-running", "The job is %s; it takes no more events.", j.Status)
	}
	if err := s.store.AppendJobEvents(ctx, jobID, evs, now); err != nil {
		return err
	}
	s.changed(Change{Job: j, Events: evs})
	return nil
}

func fieldIndex(list string, i int, field string) string {
	b, _ := json.Marshal(i)
	return list + "[" + string(b) + "]." + field
}

// Complete records the result an agent reports. Completing a finished job
// again is accepted and changes nothing.
func (s *Service) Complete(ctx context.Context, serverID, jobID string, req agentproto.CompleteRequest) (Job, error) {
	var errs fault.Fields
	var status Status
	switch req.Status {
	case agentproto.StatusSucceeded:
		status = Succeeded
	case agentproto.StatusFailed:
		status = Failed
		if req.Error == "" {
			req.Error = "failed"
		}
	default:
		errs.Add("status", "must be succeeded or failed")
	}
	if len(req.Error) > MaxEventMessage {
		errs.Add("error", "at most %d bytes", MaxEventMessage)
	}
	if err := errs.Err(); err != nil {
		return Job{}, err
	}
	j, err := s.owned(ctx, serverID, jobID)
	if err != nil {
		return Job{}, err
	}
	var errText *string
	if status == Failed {
		errText = &req.Error
	}
	data := req.Data
	if len(data) == 0 || string(data) == "null" {
		data = json.RawMessage("{}")
	}
	if j.Status == Failed && j.Error != nil && *j.Error == ErrAgentLost {
		return s.lateResult(ctx, j, LateResult{Status: status, Error: errText, Data: data, At: s.now().UTC()})
	}
	if j.Status.Finished() {
		return s.visible(j), nil
	}
	// A job queued again after a claim that was never acknowledged: its
	// agent did get it, ran it, and its result is the job's.
	if j.Status != Running && (j.Status != Queued || j.Requeues == 0) {
		return Job{}, fault.Conflictf("job-not-running", "The job is %s; only a running job can be completed.", j.Status)
	}
	ok, err := s.store.FinishJob(ctx, jobID, status, errText, data, req.Output, s.now())
	if err != nil {
		return Job{}, err
	}
	if j, err = s.store.Job(ctx, jobID); err != nil {
		return Job{}, err
	}
	if !ok {
		// Something else ended it first (its lease lapsed, its server
		// was revoked): that one runs the hook. A lease that lapsed
		// just now makes this result a late one.
		if j.Status == Failed && j.Error != nil && *j.Error == ErrAgentLost {
			return s.lateResult(ctx, j, LateResult{Status: status, Error: errText, Data: data, At: s.now().UTC()})
		}
		return s.visible(j), nil
	}
	s.runHook(ctx, j)
	j.HookPendingAt = nil
	s.jobEnded(ctx, j.ID)
	s.changed(Change{Job: j})
	return j, nil
}

// lateResult records the result of a job failed with agent_lost and runs
// its type's reconcile step, once.
func (s *Service) lateResult(ctx context.Context, j Job, late LateResult) (Job, error) {
	ok, err := s.store.RecordLateResult(ctx, j.ID, late)
	if err != nil || !ok {
		return j, err
	}
	j.LateResult = &late
	s.log.InfoContext(ctx, "late job result recorded", "job_id", j.ID, "type", j.Type, "status", string(late.Status))
	spec, _ := s.Spec(j.Type)
	h := spec.OnLateResult
	if h != nil {
		if err := h(context.WithoutCancel(ctx), j); err != nil {
			s.log.ErrorContext(ctx, "job reconcile step failed", "job_id", j.ID, "type", j.Type, "err", err.Error())
		}
	}
	s.jobEnded(ctx, j.ID)
	s.changed(Change{Job: j})
	return j, nil
}

// Heartbeat extends the leases of the jobs the agent says it runs.
func (s *Service) Heartbeat(ctx context.Context, serverID string, running []string) error {
	if len(running) == 0 {
		return nil
	}
	if len(running) > 1000 {
		return fault.Invalidf("running_job_ids", "at most 1000 ids")
	}
	return s.store.ExtendLeases(ctx, serverID, running, s.now())
}

// EndServerJobs cancels a server's queued jobs and fails its running ones.
func (s *Service) EndServerJobs(ctx context.Context, serverID string) error {
	s.ended.Store(serverID, struct{}{})
	s.wake.notify(serverID)
	err := s.store.EndServerJobs(ctx, serverID, ErrServerRevoked, s.now())
	s.ends.notify(serverEndKey(serverID))
	s.publish(ctx, msgServerEnded, serverID)
	return err
}

// runHook runs the completion hook of a job that this process ended (or
// took as stale) and then clears its pending mark. A hook that fails
// leaves the mark cleared: hooks log their own failures, and running one
// again would not make it succeed.
func (s *Service) runHook(ctx context.Context, j Job) {
	spec, _ := s.Spec(j.Type)
	h := spec.OnComplete
	// The hook and the mark are for the job, not for the request that
	// ended it: finish them if the caller hangs up.
	ctx = context.WithoutCancel(ctx)
	if h != nil {
		if err := h(ctx, j); err != nil {
			s.log.ErrorContext(ctx, "job completion hook failed", "job_id", j.ID, "type", j.Type, "err", err.Error())
		}
	}
	if err := s.store.ClearHookPending(ctx, j.ID); err != nil {
		s.log.ErrorContext(ctx, "clearing a job's pending hook", "job_id", j.ID, "err", err.Error())
	}
}

// StaleHookAfter is how long a job's completion hook may stay pending
// before the reaper runs it: the control plane that ended the job died
// before its hook ran.
const StaleHookAfter = 2 * time.Minute

// MaxRequeues bounds how many times a job is queued again because its
// claim was never acknowledged; after that a lapsed lease fails it as
// agent_lost.
const MaxRequeues = 3

// Expire ends the claims whose lease lapsed or deadline passed — a claim
// the agent never acknowledged is queued again, any other fails its job —
// fails the queued jobs that wait in vain (queued again for a server that
// stayed offline past their lease, or past their queue timeout), and runs
// the completion hooks that a control plane that died left pending.
func (s *Service) Expire(ctx context.Context) (int, error) {
	now := s.now()
	expired, requeued, err := s.store.ExpireJobs(ctx, now, MaxRequeues)
	for _, j := range requeued {
		s.log.WarnContext(ctx, "job queued again: its claim was never acknowledged", "job_id", j.ID, "server_id", j.ServerID, "requeues", j.Requeues)
		s.wake.notify(j.ServerID)
		s.publish(ctx, msgQueued, j.ServerID)
		s.changed(Change{Job: j})
	}
	s.endedHere(ctx, expired)
	if err != nil {
		return len(expired), err
	}
	// After the requeues above, so that a job queued again this round is
	// judged on its server's silence at once.
	waited, err := s.store.ExpireQueuedJobs(ctx, now, now.Add(-OfflineAfter))
	s.endedHere(ctx, waited)
	n := len(expired) + len(waited)
	if err != nil {
		return n, err
	}
	stale, err := s.store.TakeStaleHooks(ctx, now.Add(-StaleHookAfter), now, 100)
	for _, j := range stale {
		s.log.WarnContext(ctx, "running a completion hook left pending", "job_id", j.ID, "type", j.Type)
		s.runHook(ctx, j)
		j.HookPendingAt = nil
		s.jobEnded(ctx, j.ID)
		s.changed(Change{Job: j})
	}
	return n, err
}

// endedHere runs the completion hooks of jobs that the control plane
// itself just failed, and tells the readers waiting for them.
func (s *Service) endedHere(ctx context.Context, list []Job) {
	for _, j := range list {
		s.log.WarnContext(ctx, "job failed by the control plane", "job_id", j.ID, "server_id", j.ServerID, "error", *j.Error)
		s.runHook(ctx, j)
		j.HookPendingAt = nil
		s.jobEnded(ctx, j.ID)
		s.changed(Change{Job: j})
	}
}

// Grace gives every running job's lease at least grace from now. The
// control plane calls it when it starts: agents that were in backoff while
// it was down need that long to come back and heartbeat, and their jobs
// must not fail as agent_lost before they could.
func (s *Service) Grace(ctx context.Context, grace time.Duration) (int, error) {
	return s.store.GraceLeases(ctx, s.now().Add(grace))
}

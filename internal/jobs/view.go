package jobs

import "strings"

// Reader is who reads a job, and so how much of it they see. What a job
// returned (its data, output, events and the agent's error text) can hold
// anything the server printed: log lines, command output, secrets in
// either. Administrators read all of it; members read what the job is, not
// what it returned.
//
// The zero value is a member: code that forgets to say who reads shows
// the least.
type Reader int

// Readers.
const (
	// MemberReader sees a job's metadata: id, type, server, status, times,
	// timeout, creator, and the class of its error instead of the text.
	MemberReader Reader = iota
	// AdminReader sees the whole job.
	AdminReader
)

// ReaderFor returns the reader of a caller who is (or is not) an administrator.
func ReaderFor(admin bool) Reader {
	if admin {
		return AdminReader
	}
	return MemberReader
}

// Error classes: the error of a finished job as a member sees it. The
// control plane's own reasons are classes already; any error the agent
// reported is "failed", because its text may carry output.
const (
	ClassFailed    = "failed"
	ClassCancelled = "cancelled"
)

// ErrorClass returns the class of a job's error text: agent_lost,
// timed_out, server_revoked, server_offline, queue_timed_out and cancelled
// (set by the control plane) as they are, anything else (the agent's text)
// as failed.
func ErrorClass(text string) string {
	if text == ClassCancelled || ByControlPlane(text) {
		return text
	}
	if strings.HasPrefix(text, ClassCancelled+":") {
		return ClassCancelled
	}
	return ClassFailed
}

// ByControlPlane reports whether a job's error text is one of the reasons
// the control plane itself fails jobs for (agent_lost, timed_out,
// server_revoked, server_offline, queue_timed_out), not the agent's.
func ByControlPlane(text string) bool {
	switch text {
	case ErrAgentLost, ErrTimedOut, ErrServerRevoked, ErrServerOffline, ErrQueueTimedOut:
		return true
	}
	return false
}

// For returns what r may read of the job. Every view of a job the API
// serves goes through here.
func (j Job) For(r Reader) Job {
	a := ActorOf(j.CreatedBy, j.ActorEmail)
	j.Actor = &a
	if j.Error != nil {
		c := ErrorClass(*j.Error)
		j.ErrorClass = &c
	}
	if r == AdminReader {
		return j
	}
	j.Error = j.ErrorClass
	j.Payload, j.Data, j.Output = nil, nil, nil
	if j.LateResult != nil {
		late := *j.LateResult
		if late.Error != nil {
			c := ErrorClass(*late.Error)
			late.Error = &c
		}
		late.Data = nil
		j.LateResult = &late
	}
	j.Redacted = true
	return j
}

// EventsFor returns what r may read of a job's events: all of them for
// administrators, none for members (their messages and data are the job's
// output).
func EventsFor(r Reader, ev []Event) []Event {
	if r != AdminReader || ev == nil {
		return []Event{}
	}
	return ev
}

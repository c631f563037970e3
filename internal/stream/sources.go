package stream

import (
	"context"
	"encoding/json"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// JobEvents is the data of a job.events message.
type JobEvents struct {
	JobID    string       `json:"job_id"`
	ServerID string       `json:"server_id"`
	AppID    string       `json:"app_id,omitempty" doc:"The job's application, if it has one"`
	Type     string       `json:"type" doc:"The job's type"`
	Events   []jobs.Event `json:"events"`
}

// streamed is a job as the stream carries it: its state, without what it
// returned (data, output), which a reader fetches from GET /api/v1/jobs/{id}.
func streamed(j jobs.Job, r jobs.Reader) jobs.Job {
	j = j.For(r)
	j.Data, j.Output = nil, nil
	return j
}

// PublishJob sends a job change: its state to everyone (a member sees it
// as members read jobs: no payload, the error's class only), its progress
// events to administrators only (their messages are the job's output).
func (h *Hub) PublishJob(c jobs.Change) {
	for _, m := range jobMessages(c) {
		h.Publish(m)
	}
}

// eventsChunk is how large a job.events message grows before the events
// go on in another: small enough for a relay to carry it whole.
const eventsChunk = 6 << 10

// jobMessages are the messages of a job change. Many progress events (a
// build's output) are split over several messages.
func jobMessages(c jobs.Change) []Message {
	if len(c.Events) > 0 {
		var out []Message
		evs := jobs.EventsFor(jobs.AdminReader, c.Events)
		for len(evs) > 0 {
			n, size := 0, 0
			for n < len(evs) && (n == 0 || size+len(evs[n].Message)+len(evs[n].Data)+96 <= eventsChunk) {
				size += len(evs[n].Message) + len(evs[n].Data) + 96
				n++
			}
			admin, err := json.Marshal(JobEvents{JobID: c.Job.ID, ServerID: c.Job.ServerID, AppID: c.Job.AppID, Type: c.Job.Type, Events: evs[:n]})
			if err == nil {
				out = append(out, Message{Type: TypeJobEvents, Admin: admin, ServerID: c.Job.ServerID, AppID: c.Job.AppID})
			}
			evs = evs[n:]
		}
		return out
	}
	admin, err1 := json.Marshal(streamed(c.Job, jobs.AdminReader))
	member, err2 := json.Marshal(streamed(c.Job, jobs.MemberReader))
	if err1 != nil || err2 != nil {
		return nil
	}
	return []Message{{Type: TypeJob, Admin: admin, Member: member, jobID: c.Job.ID, ServerID: c.Job.ServerID, AppID: c.Job.AppID}}
}

// PublishEvent sends an event of the event bus. Members get it without
// the payload's error text (a failed deployment's or backup's error may
// hold a program's output), as the inbox tells it to them.
func (h *Hub) PublishEvent(ev events.Event) {
	admin, err := json.Marshal(ev)
	if err != nil {
		return
	}
	m := ev
	var payload map[string]any
	if json.Unmarshal(ev.Payload, &payload) == nil {
		delete(payload, "error")
		m.Payload, _ = json.Marshal(payload)
	} else {
		m.Payload = json.RawMessage("{}")
	}
	member, err := json.Marshal(m)
	if err != nil {
		return
	}
	h.Publish(Message{Type: TypeEvent, Admin: admin, Member: member})
}

// InboxItem is the data of an inbox message: which event reached the
// user's inbox. The console reloads the inbox and its unread count.
type InboxItem struct {
	EventID   string         `json:"event_id"`
	EventType events.Type    `json:"event_type"`
	Subject   events.Subject `json:"subject"`
}

// Inbox wraps the inbox destination so that each item it puts in a
// user's inbox is also sent to that user's streams, once stored.
func (h *Hub) Inbox(d events.Destination) events.Destination { return inbox{Destination: d, hub: h} }

type inbox struct {
	events.Destination
	hub *Hub
}

func (i inbox) Deliver(ctx context.Context, userID string, d events.Delivery, ev events.Event) (events.Result, error) {
	res, err := i.Destination.Deliver(ctx, userID, d, ev)
	if err != nil {
		return res, err
	}
	if data, err := json.Marshal(InboxItem{EventID: ev.ID, EventType: ev.Type, Subject: ev.Subject}); err == nil {
		i.hub.Publish(Message{Type: TypeInbox, Admin: data, Member: data, UserID: userID})
	}
	return res, nil
}

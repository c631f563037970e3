package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/stream"
)

var errNoStream = errors.New("httpapi: Deps.Stream or Deps.StreamTickets is not set")

// streamPing is how often an idle stream sends a comment, so that proxies
// keep it open and a dead client is noticed.
const streamPing = 15 * time.Second

// streamWriteTimeout bounds one write to a stream's client.
const streamWriteTimeout = 30 * time.Second

type streamTicketOutput struct {
	Body struct {
		Ticket    string    `json:"ticket" doc:"Pass as ticket= to GET /api/v1/stream within expires_at; it works once"`
		ExpiresAt time.Time `json:"expires_at"`
	}
}

type streamInput struct {
	Ticket      string `query:"ticket" required:"true" maxLength:"100" doc:"A ticket from POST /api/v1/stream/tickets"`
	LastEventID string `query:"last_event_id" maxLength:"24" doc:"Resume after this message id (the id of the last message received)"`
	// The browser's EventSource sends Last-Event-ID itself when it
	// reconnects on its own.
	LastEventHeader string `header:"Last-Event-ID" maxLength:"24" doc:"As last_event_id; the query parameter wins"`
}

func parseLastEventID(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a message id")
	}
	return n, nil
}

const streamDescription = "A Server-Sent Events stream (text/event-stream) of what changes, as it happens, for the web console " +
	"and other live clients. An EventSource sends no Authorization header, so the stream is opened with a single-use " +
	"ticket from POST /api/v1/stream/tickets (valid 30 s), which stands for the caller that took it; the stream ends when " +
	"the access token that took the ticket expires, and the client takes a new ticket. It closes within seconds when its session ends " +
	"(sign-out, a revoked session, another session's password change, a disabled user or a reset second factor).\n\n" +
	"Messages (the SSE event name, then the JSON data):\n\n" +
	"- `job`: a job was queued, started, finished, cancelled or expired: the job as GET /api/v1/jobs/{id} shows it to the " +
	"caller, without data and output. A finished job's completion (the deployment, the instance) is recorded before.\n" +
	"- `job.events`: progress events of a running job {job_id, server_id, type, events}. Administrators only: members never " +
	"receive a job's events or output.\n" +
	"- `event`: an event of the control plane (servers enrolled, online, offline, revoked; alerts opened and resolved; " +
	"deployments succeeded or failed; backups failed), as GET /api/v1/events lists it; members get it without the payload's " +
	"error text.\n" +
	"- `inbox`: a new item in the caller's inbox {event_id, event_type, subject}.\n" +
	"- `reset`: messages were missed (the control plane restarted, or the client was away too long): reload what is shown.\n\n" +
	"Every message has an id. A client that reconnects passes the last id it received as last_event_id (or the " +
	"Last-Event-ID header) and receives the messages it missed, or `reset` when they are no longer kept (the newest " +
	"4096 messages are), or come from before a restart or from another control plane. A comment line is sent every " +
	"15 s while nothing happens. A client that falls far behind is disconnected and resumes by reconnecting. With " +
	"several control planes sharing PostgreSQL, every stream carries the whole fleet's messages, whichever one made the change."

func (s *Server) registerStream() {
	tags := []string{"Live stream"}
	op(s, huma.Operation{
		OperationID: "create-stream-ticket", Method: http.MethodPost, Path: "/api/v1/stream/tickets", Tags: tags,
		Summary:       "Take a single-use ticket that opens the live stream",
		Description:   "The ticket opens GET /api/v1/stream once, within 30 s, as the caller. Only its hash is stored.",
		DefaultStatus: http.StatusCreated,
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*streamTicketOutput, error) {
		if s.deps.Stream == nil || s.deps.StreamTickets == nil {
			return nil, errNoStream
		}
		p := principal(ctx)
		now := time.Now().UTC()
		ticket := ids.Token(stream.TicketPrefix)
		expires := now.Add(stream.TicketTTL)
		t := stream.Ticket{UserID: p.User.ID, SessionID: p.SessionID, Until: p.ExpiresAt}
		if p.Token != nil {
			// A token's stream ends when the token does (revoked, expired,
			// its owner disabled or, reading secrets, demoted), and after
			// an hour at most: then the client takes a new ticket.
			t.SessionID, t.Until = p.Token.ID, now.Add(time.Hour)
			if p.Token.ExpiresAt != nil && p.Token.ExpiresAt.Before(t.Until) {
				t.Until = *p.Token.ExpiresAt
			}
		}
		err := s.deps.StreamTickets.CreateStreamTicket(ctx, ids.Hash(ticket), t, expires, now)
		if err != nil {
			return nil, err
		}
		out := &streamTicketOutput{}
		out.Body.Ticket, out.Body.ExpiresAt = ticket, expires
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "stream", Method: http.MethodGet, Path: "/api/v1/stream", Tags: tags,
		Summary:     "Live stream of job, server, alert, deployment and inbox changes (Server-Sent Events)",
		Description: streamDescription + "\n\nNo Authorization header: the ticket is the credential (401 `invalid-stream-ticket` without a live one).",
		Errors:      []int{http.StatusUnauthorized},
		Responses: map[string]*huma.Response{"200": {
			Description: "The stream",
			Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{Type: huma.TypeString,
				Description: "Server-Sent Events: `id:`, `event:` (job, job.events, event, inbox, reset) and `data:` (JSON) lines"}}},
		}},
	}, Public, func(ctx context.Context, in *streamInput) (*huma.StreamResponse, error) {
		if s.deps.Stream == nil || s.deps.StreamTickets == nil {
			return nil, errNoStream
		}
		idText := in.LastEventID
		if idText == "" {
			idText = strings.TrimSpace(in.LastEventHeader)
		}
		after, err := parseLastEventID(idText)
		if err != nil {
			return nil, fault.Invalidf("last_event_id", "must be the id of a message of this stream")
		}
		if !strings.HasPrefix(in.Ticket, stream.TicketPrefix+"_") {
			return nil, stream.ErrTicket
		}
		t, err := s.deps.StreamTickets.RedeemStreamTicket(ctx, ids.Hash(in.Ticket), time.Now())
		if err != nil {
			return nil, err
		}
		viewer, err := s.streamViewer(ctx, t)
		if err != nil {
			return nil, err
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			ended, stop := s.sessions.watch(t.SessionID)
			defer stop()
			s.serveStream(hctx, viewer, after, t.Until, ended)
		}}, nil
	})
}

// streamViewer is the user a ticket stands for, as they are now; for a
// token's ticket, with what the token may read.
func (s *Server) streamViewer(ctx context.Context, t stream.Ticket) (stream.Viewer, error) {
	if strings.HasPrefix(t.SessionID, auth.TokenIDPrefix+"_") {
		p, err := s.deps.Auth.TokenByID(ctx, t.SessionID)
		if fault.Is(err, fault.Unauthenticated) {
			return stream.Viewer{}, stream.ErrTicket
		}
		if err != nil {
			return stream.Viewer{}, err
		}
		v := stream.Viewer{UserID: p.User.ID, Admin: p.Allows(auth.ScopeReadSecrets)}
		if len(p.Token.Resources) > 0 {
			if v.Covers, err = s.streamCovers(ctx, p.Token.Resources); err != nil {
				return stream.Viewer{}, err
			}
		}
		return v, nil
	}
	userID := t.UserID
	users, err := s.deps.Auth.ListUsers(ctx)
	if err != nil {
		return stream.Viewer{}, err
	}
	for _, u := range users {
		if u.ID == userID && !u.Disabled {
			return stream.Viewer{UserID: u.ID, Admin: u.Admin}, nil
		}
	}
	return stream.Viewer{}, stream.ErrTicket
}

// serveStream writes the stream for v until the client goes, until, or
// ended is closed (the session ended).
func (s *Server) serveStream(hctx huma.Context, v stream.Viewer, after int64, until time.Time, ended <-chan struct{}) {
	ctx := hctx.Context()
	w := hctx.BodyWriter()
	rc := http.NewResponseController(unwrapWriter(w))
	// The server's read timeout would end a long stream: the request has
	// no body, so nothing more is read.
	_ = rc.SetReadDeadline(time.Time{})
	hctx.SetHeader("Content-Type", "text/event-stream")
	hctx.SetHeader("X-Accel-Buffering", "no")
	hctx.SetStatus(http.StatusOK)

	sub, backlog, last, resumed := s.deps.Stream.Subscribe(after)
	defer sub.Close()

	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	send := func(m stream.Message) bool {
		data, ok := m.For(v)
		if !ok {
			return true
		}
		return write(fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", m.ID, m.Type, data))
	}
	// The opening comment flushes the headers at once, so the client
	// knows the stream is open.
	if !write([]byte(": capstan stream\n\n")) {
		return
	}
	if !resumed {
		if !write(fmt.Appendf(nil, "id: %d\nevent: %s\ndata: {}\n\n", last, stream.TypeReset)) {
			return
		}
	}
	for _, m := range backlog {
		if !send(m) {
			return
		}
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	end := time.NewTimer(time.Until(until))
	defer end.Stop()
	for {
		select {
		case m := <-sub.C():
			if !send(m) {
				return
			}
		case <-ping.C:
			if !write([]byte(": ping\n\n")) {
				return
			}
		case <-sub.Dropped():
			return
		case <-end.C:
			return
		case <-ended:
			return
		case <-ctx.Done():
			return
		}
	}
}

// unwrapWriter returns w itself: huma's body writer is the response
// writer, which http.ResponseController unwraps further.
func unwrapWriter(w any) http.ResponseWriter {
	if rw, ok := w.(http.ResponseWriter); ok {
		return rw
	}
	return nil
}

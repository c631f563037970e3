package stream

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
)

// TicketTTL is how long a stream ticket can be redeemed.
const TicketTTL = 30 * time.Second

// TicketPrefix starts every stream ticket.
const TicketPrefix = "stk"

// Ticket is what a stream ticket stands for.
type Ticket struct {
	UserID    string
	SessionID string
	// Until is when the access token that took the ticket expires; the
	// stream it opens ends then, and the client takes a new ticket.
	Until time.Time
}

// ErrTicket is returned for a ticket that is unknown, used or expired, or
// whose session ended.
var ErrTicket = fault.Unauthenticatedf("invalid-stream-ticket",
	"The stream ticket is unknown, used or expired, or its session ended. Take a new one with POST /api/v1/stream/tickets.")

// TicketStore keeps stream tickets by hash.
type TicketStore interface {
	CreateStreamTicket(ctx context.Context, hash string, t Ticket, expires, now time.Time) error
	// RedeemStreamTicket uses a ticket once: of concurrent calls with the
	// same hash, one gets it and the others ErrTicket.
	RedeemStreamTicket(ctx context.Context, hash string, now time.Time) (Ticket, error)
}

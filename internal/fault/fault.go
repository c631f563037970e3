// Package fault defines the error kinds that domain packages return and that
// the HTTP layers turn into RFC 9457 problems. Domain code never chooses an
// HTTP status; it chooses a Kind and, where the client can act on it, a stable
// Code. Messages are safe to show to clients; the wrapped cause is not.
package fault

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies an error by what the caller can do about it.
type Kind int

// Kinds grow at the end.
const (
	Internal        Kind = iota // a bug or an unavailable dependency; details are only logged
	Invalid                     // the input breaks a rule; Fields says which
	NotFound                    // the resource does not exist (or is not visible to the caller)
	Conflict                    // the resource's state does not allow the operation
	Unauthenticated             // no, bad, expired or revoked credentials
	Forbidden                   // authenticated, but not allowed
	TooManyRequests             // throttled; RetryAfter says when to try again
	Gone                        // the resource existed but has expired or been used up
	Upstream                    // a provider the operation depends on failed or could not be reached
	TooLarge                    // the request's content is over a limit
)

// FieldError names one invalid input field. Field is a dotted JSON path
// relative to the request body ("email", "tags[2]") or a parameter name.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is the error type every domain package returns for conditions a
// client should see. Any other error is treated as Internal.
type Error struct {
	Kind Kind
	// Code is a stable, lowercase, dash-separated identifier of the problem
	// ("invalid-credentials"). Empty means the kind's default.
	Code string
	// Message is a human-readable explanation that is safe for clients.
	Message string
	// Fields lists the invalid fields of an Invalid error; nil otherwise.
	Fields []FieldError
	// RetryAfter is set on TooManyRequests errors.
	RetryAfter time.Duration
	// Err is the underlying cause, for logs only; never sent to clients.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// As returns the *Error in err's chain, or nil.
func As(err error) *Error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	return nil
}

// KindOf returns the Kind of err: Internal for any error that is not an *Error.
func KindOf(err error) Kind {
	if fe := As(err); fe != nil {
		return fe.Kind
	}
	return Internal
}

// Is reports whether err is a fault of the given kind.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// New returns an error of the given kind and code.
func New(k Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotFoundf reports a missing resource.
func NotFoundf(format string, args ...any) *Error {
	return &Error{Kind: NotFound, Message: fmt.Sprintf(format, args...)}
}

// Conflictf reports a state conflict.
func Conflictf(code, format string, args ...any) *Error {
	return &Error{Kind: Conflict, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Forbiddenf reports an operation the caller may not perform.
func Forbiddenf(code, format string, args ...any) *Error {
	return &Error{Kind: Forbidden, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Unauthenticatedf reports missing or bad credentials.
func Unauthenticatedf(code, format string, args ...any) *Error {
	return &Error{Kind: Unauthenticated, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Fields collects field errors for one Invalid error.
type Fields []FieldError

// Add records that field is invalid.
func (f *Fields) Add(field, format string, args ...any) {
	*f = append(*f, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err returns an Invalid error listing the collected fields, or nil if none.
func (f Fields) Err() error {
	if len(f) == 0 {
		return nil
	}
	return &Error{Kind: Invalid, Message: "The request has invalid fields.", Fields: f}
}

// Invalidf returns an Invalid error for a single field.
func Invalidf(field, format string, args ...any) *Error {
	var f Fields
	f.Add(field, format, args...)
	return &Error{Kind: Invalid, Message: "The request has invalid fields.", Fields: f}
}

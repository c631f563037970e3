package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// ProblemTypeBase prefixes every problem type URI. Types are stable: clients
// may switch on them.
const ProblemTypeBase = "https://capstan.dev/problems/"

// Problem is an RFC 9457 problem details object, the body of every error
// response.
type Problem struct {
	Type      string             `json:"type" doc:"URI that identifies the kind of problem; stable across versions"`
	Title     string             `json:"title" doc:"Short summary of the kind of problem"`
	Status    int                `json:"status" doc:"HTTP status code"`
	Detail    string             `json:"detail" doc:"Explanation of this occurrence of the problem"`
	Instance  string             `json:"instance,omitempty" doc:"The request path"`
	RequestID string             `json:"request_id,omitempty" doc:"Identifies the request in the server's log"`
	Errors    []fault.FieldError `json:"errors,omitempty" doc:"The invalid fields, for validation problems"`

	headers http.Header
}

func (p *Problem) Error() string  { return p.Detail }
func (p *Problem) GetStatus() int { return p.Status }

// GetHeaders lets huma set extra headers (Retry-After, Allow) on the response.
func (p *Problem) GetHeaders() http.Header {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	return p.headers
}

// ContentType makes huma send problems as application/problem+json.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	return ct
}

// defaultCodes are the problem codes used when an error carries none.
var defaultCodes = map[int]string{
	http.StatusBadRequest:            "malformed-request",
	http.StatusUnauthorized:          "unauthenticated",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not-found",
	http.StatusMethodNotAllowed:      "method-not-allowed",
	http.StatusNotAcceptable:         "not-acceptable",
	http.StatusRequestTimeout:        "request-timeout",
	http.StatusConflict:              "conflict",
	http.StatusGone:                  "gone",
	http.StatusRequestEntityTooLarge: "body-too-large",
	http.StatusUnsupportedMediaType:  "unsupported-media-type",
	http.StatusUnprocessableEntity:   "validation-failed",
	http.StatusTooManyRequests:       "too-many-requests",
	http.StatusInternalServerError:   "internal-error",
	http.StatusBadGateway:            "provider-failed",
	http.StatusServiceUnavailable:    "unavailable",
}

func newProblem(status int, code, detail string) *Problem {
	if code == "" {
		code = defaultCodes[status]
		if code == "" {
			code = "http-" + strconv.Itoa(status)
		}
	}
	return &Problem{Type: ProblemTypeBase + code, Title: http.StatusText(status), Status: status, Detail: detail}
}

func init() {
	// Every error huma produces itself (malformed JSON, wrong content type,
	// body too large, schema validation) becomes a Problem. Echoed input
	// values are dropped: they may hold passwords.
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		p := newProblem(status, "", msg)
		for _, e := range errs {
			if e == nil {
				continue
			}
			if d, ok := e.(huma.ErrorDetailer); ok {
				det := d.ErrorDetail()
				p.Errors = append(p.Errors, fault.FieldError{Field: requiredField(fieldName(det.Location), det.Message), Message: det.Message})
			} else if status == http.StatusUnprocessableEntity {
				p.Errors = append(p.Errors, fault.FieldError{Message: e.Error()})
			}
		}
		switch status {
		case http.StatusBadRequest:
			// JSON syntax errors carry parser text, which may quote input.
			p.Detail = "The request body is not valid JSON."
			p.Errors = nil
		case http.StatusUnprocessableEntity:
			p.Detail = "The request has invalid fields."
		case http.StatusUnsupportedMediaType:
			p.Detail = "The request body must be sent as Content-Type: application/json."
			p.Errors = nil
		case http.StatusRequestEntityTooLarge:
			p.Errors = nil
		case http.StatusInternalServerError:
			p.Detail = "An internal error occurred."
			p.Errors = nil
		}
		return p
	}
	huma.NewErrorWithContext = func(ctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
		p := huma.NewError(status, msg, errs...).(*Problem)
		if ctx != nil {
			p.RequestID = requestID(ctx.Context())
			p.Instance = ctx.URL().Path
			explainBounds(p, ctx.Operation())
		}
		return p
	}
}

// fieldName turns huma's locations ("body.tags[2]", "query.limit",
// "path.id") into field names relative to where they came from.
func fieldName(loc string) string {
	for _, prefix := range []string{"body.", "query.", "path.", "header.", "cookie."} {
		if strings.HasPrefix(loc, prefix) {
			return strings.TrimPrefix(loc, prefix)
		}
	}
	if loc == "body" {
		return ""
	}
	return loc
}

// requiredField names the missing property of huma's "expected required
// property NAME to be present", which huma locates at the object holding
// it (field "" for a top-level property): the field is the property.
func requiredField(field, msg string) string {
	const prefix, suffix = "expected required property ", " to be present"
	name, ok := strings.CutPrefix(msg, prefix)
	if !ok || !strings.HasSuffix(name, suffix) {
		return field
	}
	name = strings.TrimSuffix(name, suffix)
	if field == "" {
		return name
	}
	return field + "." + name
}

var kindStatus = map[fault.Kind]int{
	fault.Internal:        http.StatusInternalServerError,
	fault.Invalid:         http.StatusUnprocessableEntity,
	fault.NotFound:        http.StatusNotFound,
	fault.Conflict:        http.StatusConflict,
	fault.Unauthenticated: http.StatusUnauthorized,
	fault.Forbidden:       http.StatusForbidden,
	fault.TooManyRequests: http.StatusTooManyRequests,
	fault.Gone:            http.StatusGone,
	fault.Upstream:        http.StatusBadGateway,
	fault.TooLarge:        http.StatusRequestEntityTooLarge,
}

// problemFor maps any error to a Problem. Errors that are not faults are
// logged with the request id and shown to the client only as "internal".
func problemFor(ctx context.Context, log *slog.Logger, err error) *Problem {
	p := problemOf(ctx, log, err)
	p.RequestID = requestID(ctx)
	if r := requestFrom(ctx); r.URL != nil {
		p.Instance = r.URL.Path
	}
	return p
}

func problemOf(ctx context.Context, log *slog.Logger, err error) *Problem {
	if p, ok := err.(*Problem); ok {
		return p
	}
	var km *secrets.KeyMismatchError
	if errors.As(err, &km) {
		// Not the client's fault, nor a bug: the server runs with a key
		// other than the one a stored secret was sealed with. The key
		// ids go to the log only.
		log.ErrorContext(ctx, "secret sealed with another key", "err", err.Error(), "sealed_with", km.Want, "key", km.Have,
			"request_id", requestID(ctx))
		return newProblem(http.StatusInternalServerError, "key-mismatch", "A secret this request needs was sealed with "+
			"another secret key than the one this control plane runs with. An operator must restart it with the key the "+
			"store's secrets were sealed with: its data dir (--data-dir, which holds secret.key) or CAPSTAN_SECRET_KEY. "+
			"The request id finds both key ids in the server log.")
	}
	fe := fault.As(err)
	if fe == nil || fe.Kind == fault.Internal {
		if ctx.Err() != nil {
			// The client went away; nothing useful to say or log loudly.
			p := newProblem(http.StatusServiceUnavailable, "request-cancelled", "The request was cancelled.")
			return p
		}
		log.ErrorContext(ctx, "internal error", "err", err.Error(), "request_id", requestID(ctx))
		p := newProblem(http.StatusInternalServerError, "", "An internal error occurred. The request id identifies it in the server log.")
		p.RequestID = requestID(ctx)
		return p
	}
	status := kindStatus[fe.Kind]
	p := newProblem(status, fe.Code, fe.Message)
	p.Errors = fe.Fields
	p.RequestID = requestID(ctx)
	if fe.RetryAfter > 0 {
		p.GetHeaders().Set("Retry-After", strconv.Itoa(int((fe.RetryAfter+time.Second-1)/time.Second)))
	}
	return p
}

// writeProblem writes p to an http.ResponseWriter, for errors that happen
// outside huma (unknown paths, panics, authentication middleware).
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	if p.RequestID == "" && r != nil {
		p.RequestID = requestID(r.Context())
	}
	for k, vs := range p.headers {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p) //nolint:errchkjson // nothing to do if the client went away
}

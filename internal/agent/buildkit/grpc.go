package buildkit

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// gRPC over HTTP/2, as far as two unary methods need it: a request is a
// POST to the method's path with content type application/grpc whose
// body is one length-prefixed message; the answer is status 200 with the
// reply as one length-prefixed message, and the call's status in the
// trailers grpc-status and grpc-message.

// gRPC status codes the session answers with.
const (
	codeOK            = 0
	codeNotFound      = 5
	codeInvalid       = 3
	codeUnimplemented = 12
)

// maxRequest bounds a request's body: both requests are a few names.
const maxRequest = 64 << 10

// healthServing is grpc.health.v1.HealthCheckResponse.ServingStatus
// SERVING.
const healthServing = 1

// handler serves the session's methods.
type handler struct {
	// secrets are the build secrets by id; never changed after OpenSession.
	secrets map[string][]byte
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	ct := r.Header.Get("Content-Type")
	if r.Method != http.MethodPost || ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+proto") &&
		!strings.HasPrefix(ct, "application/grpc;") {
		w.WriteHeader(http.StatusUnsupportedMediaType)
		return
	}
	w.Header().Set("Content-Type", "application/grpc")
	msg, err := readMessage(r.Body)
	if err != nil {
		fail(w, codeInvalid, err.Error())
		return
	}
	switch r.URL.Path {
	case MethodGetSecret:
		id, err := secretID(msg)
		if err != nil {
			fail(w, codeInvalid, err.Error())
			return
		}
		v, ok := h.secrets[id]
		if !ok {
			// BuildKit reads NotFound as a secret the build was not
			// given: a required mount fails, an optional one is skipped.
			fail(w, codeNotFound, fmt.Sprintf("secret %s not found", id))
			return
		}
		reply(w, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), v))
	case MethodHealthCheck:
		reply(w, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), healthServing))
	default:
		fail(w, codeUnimplemented, "unknown method "+r.URL.Path)
	}
}

// readMessage reads a request's one length-prefixed message.
func readMessage(body io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, maxRequest+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request: %w", err)
	}
	if len(b) > maxRequest {
		return nil, fmt.Errorf("request larger than %d bytes", maxRequest)
	}
	if len(b) < 5 {
		return nil, fmt.Errorf("request of %d bytes: no message", len(b))
	}
	if b[0] != 0 {
		return nil, fmt.Errorf("compressed requests are not accepted")
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) != uint64(len(b)-5) {
		return nil, fmt.Errorf("request holds %d bytes after its prefix, which announces %d: one message is expected", len(b)-5, n)
	}
	return b[5:], nil
}

// secretID reads moby.buildkit.secrets.v1.GetSecretRequest's ID (field
// 1); its annotations (field 2) are ignored.
func secretID(msg []byte) (string, error) {
	var id string
	err := fields(msg, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == 1 && typ == protowire.BytesType {
			id = string(v)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("malformed GetSecretRequest: %w", err)
	}
	return id, nil
}

// reply answers a call with its reply message and status OK.
func reply(w http.ResponseWriter, msg []byte) {
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	w.WriteHeader(http.StatusOK)
	w.Write(append(frame, msg...)) //nolint:errcheck // the peer's failure to read is its own
	finish(w, codeOK, "")
}

// fail answers a call with an error status and no reply.
func fail(w http.ResponseWriter, code int, message string) {
	w.WriteHeader(http.StatusOK)
	finish(w, code, message)
}

// finish ends a call whose headers are written with a status in the
// trailers.
func finish(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Grpc-Status", strconv.Itoa(code))
	if message != "" {
		w.Header().Set("Grpc-Message", percentEncode(message))
	}
}

// percentEncode encodes a grpc-message: printable ASCII but '%' as it
// is, every other byte as %XX.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

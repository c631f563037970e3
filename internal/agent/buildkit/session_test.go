package buildkit_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/capstan-dev/capstan/internal/agent/buildkit"
)

// engine plays the engine's side of a session: the dialer hands the
// session one end of a connection, and calls are made over the other end
// with HTTP/2 as a gRPC client makes them.
type engine struct {
	meta map[string][]string
	hc   *http.Client
	conn net.Conn
}

func openSession(t *testing.T, ctx context.Context, secrets map[string][]byte) (*buildkit.Session, *engine) {
	t.Helper()
	ours, theirs := net.Pipe()
	e := &engine{conn: ours}
	dial := func(_ context.Context, proto string, meta map[string][]string) (net.Conn, error) {
		if proto != "h2c" {
			return nil, fmt.Errorf("proto %q, want h2c", proto)
		}
		e.meta = meta
		return theirs, nil
	}
	s, err := buildkit.OpenSession(ctx, dial, "capstan-test", secrets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	dialed := false
	e.hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &protocols,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if dialed {
				return nil, fmt.Errorf("the session has one connection")
			}
			dialed = true
			return ours, nil
		}}}
	return s, e
}

// call makes a unary gRPC call and returns the reply message, the
// grpc-status and the grpc-message.
func (e *engine) call(t *testing.T, method string, msg []byte) ([]byte, string, string) {
	t.Helper()
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	req, err := http.NewRequest(http.MethodPost, "http://session"+method, bytes.NewReader(append(body, msg...)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	res, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/grpc" || res.ProtoMajor != 2 {
		t.Fatalf("%s: %s %s, content type %q; want 200 over HTTP/2, application/grpc", method, res.Proto, res.Status, res.Header.Get("Content-Type"))
	}
	var reply []byte
	if len(b) > 0 {
		if len(b) < 5 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
			t.Fatalf("%s: reply %x is not one length-prefixed message", method, b)
		}
		reply = b[5:]
	}
	return reply, res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
}

func getSecretRequest(id string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, id)
	// An annotation (map entry), which the session ignores.
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k")
	entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), "v")
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, entry)
}

// TestSessionServesSecrets opens a session and calls it as the engine
// does: the headers of POST /session announce the session and its two
// methods; GetSecret answers each secret's value and NotFound for an id
// it was not given; the health check answers SERVING; any other method is
// unimplemented. Closing the session closes its connection.
func TestSessionServesSecrets(t *testing.T) {
	secrets := map[string][]byte{"NPM_TOKEN": []byte("npm_s3cret"), "empty": {}}
	s, e := openSession(t, context.Background(), secrets)

	if got := e.meta["X-Docker-Expose-Session-Uuid"]; len(got) != 1 || got[0] != s.ID() || len(s.ID()) < 20 {
		t.Errorf("session id header %v, want [%s] (at least 20 characters)", got, s.ID())
	}
	if got := e.meta["X-Docker-Expose-Session-Name"]; len(got) != 1 || got[0] != "capstan-test" {
		t.Errorf("session name header %v", got)
	}
	if got := e.meta["X-Docker-Expose-Session-Sharedkey"]; len(got) != 1 || got[0] == "" {
		t.Errorf("shared key header %v, want one value", got)
	}
	methods := e.meta["X-Docker-Expose-Session-Grpc-Method"]
	slices.Sort(methods)
	if got, want := strings.Join(methods, " "), "/grpc.health.v1.Health/Check /moby.buildkit.secrets.v1.Secrets/GetSecret"; got != want {
		t.Errorf("methods %q, want %q", got, want)
	}

	for id, want := range secrets {
		reply, status, msg := e.call(t, buildkit.MethodGetSecret, getSecretRequest(id))
		if status != "0" {
			t.Fatalf("GetSecret %s: status %s %q, want 0", id, status, msg)
		}
		num, typ, n := protowire.ConsumeTag(reply)
		data, m := protowire.ConsumeBytes(reply[max(n, 0):])
		if len(want) == 0 && len(reply) != 2 || n < 0 || num != 1 || typ != protowire.BytesType || m != len(reply)-n || !bytes.Equal(data, want) {
			t.Errorf("GetSecret %s: reply %x, want field 1 = %q", id, reply, want)
		}
	}
	reply, status, msg := e.call(t, buildkit.MethodGetSecret, getSecretRequest("OTHER"))
	if status != "5" || !strings.Contains(msg, "OTHER") || reply != nil {
		t.Errorf("GetSecret of an unknown id: status %s %q, reply %x; want 5 (NotFound) naming it, no reply", status, msg, reply)
	}
	reply, status, _ = e.call(t, buildkit.MethodHealthCheck, nil)
	if status != "0" || !bytes.Equal(reply, []byte{0x08, 0x01}) {
		t.Errorf("health check: status %s, reply %x; want 0 and status SERVING (08 01)", status, reply)
	}
	_, status, _ = e.call(t, "/moby.filesync.v1.FileSync/DiffCopy", nil)
	if status != "12" {
		t.Errorf("an unknown method: status %s, want 12 (Unimplemented)", status)
	}
	_, status, _ = e.call(t, buildkit.MethodGetSecret, []byte{0xff})
	if status != "3" {
		t.Errorf("a malformed request: status %s, want 3 (InvalidArgument)", status)
	}

	s.Close()
	e.waitClosed(t)
}

// waitClosed fails the test unless the session closes the connection:
// the engine's end reads its end, or the HTTP client closed it on
// seeing it.
func (e *engine) waitClosed(t *testing.T) {
	t.Helper()
	e.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, e.conn); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the connection: %v, want it closed", err)
	}
}

// TestSessionEndsWithContext: a session whose context ends closes its
// connection.
func TestSessionEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, e := openSession(t, ctx, nil)
	if _, status, _ := e.call(t, buildkit.MethodHealthCheck, nil); status != "0" {
		t.Fatalf("health check: status %s", status)
	}
	cancel()
	e.waitClosed(t)
}

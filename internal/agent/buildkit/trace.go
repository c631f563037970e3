package buildkit

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// A BuildKit build's output through the Engine API is a stream of JSON
// messages; those with id TraceID carry, in aux, a base64 JSON string of
// a moby.buildkit.v1.StatusResponse: the build's vertexes (its steps) as
// they start and complete, and their output.

// Ids of the build output's messages.
const (
	// TraceID marks a progress message, its aux a StatusResponse.
	TraceID = "moby.buildkit.trace"
	// ImageID marks the message whose aux is {"ID": image id}.
	ImageID = "moby.image.id"
)

// Status is the part of a StatusResponse the agent reports.
type Status struct {
	Vertexes []Vertex
	Logs     []Log
}

// Vertex is a step of the build as the trace reports it; a vertex is
// reported again as it changes.
type Vertex struct {
	Digest string
	// Name is what the step does, e.g. "[2/3] RUN make".
	Name      string
	Cached    bool
	Started   bool
	Completed bool
	// Error is why the step failed; "" if it did not.
	Error string
}

// Log is output of a step.
type Log struct {
	Vertex string
	// Stream is 1 for standard output, 2 for standard error.
	Stream int64
	Msg    []byte
}

// DecodeStatus decodes a StatusResponse (fields 1 vertexes and 3 logs;
// statuses and warnings are skipped).
func DecodeStatus(b []byte) (Status, error) {
	var s Status
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			vx, err := decodeVertex(v)
			if err != nil {
				return fmt.Errorf("vertex: %w", err)
			}
			s.Vertexes = append(s.Vertexes, vx)
		case num == 3 && typ == protowire.BytesType:
			l, err := decodeLog(v)
			if err != nil {
				return fmt.Errorf("log: %w", err)
			}
			s.Logs = append(s.Logs, l)
		}
		return nil
	})
	return s, err
}

// decodeVertex decodes a moby.buildkit.v1.Vertex: digest 1, name 3,
// cached 4, started 5, completed 6, error 7.
func decodeVertex(b []byte) (Vertex, error) {
	var vx Vertex
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			vx.Digest = string(v)
		case num == 3 && typ == protowire.BytesType:
			vx.Name = string(v)
		case num == 4 && typ == protowire.VarintType:
			n, _ := protowire.ConsumeVarint(v)
			vx.Cached = n != 0
		case num == 5 && typ == protowire.BytesType:
			vx.Started = true
		case num == 6 && typ == protowire.BytesType:
			vx.Completed = true
		case num == 7 && typ == protowire.BytesType:
			vx.Error = string(v)
		}
		return nil
	})
	return vx, err
}

// decodeLog decodes a moby.buildkit.v1.VertexLog: vertex 1, stream 3,
// msg 4.
func decodeLog(b []byte) (Log, error) {
	var l Log
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			l.Vertex = string(v)
		case num == 3 && typ == protowire.VarintType:
			n, _ := protowire.ConsumeVarint(v)
			l.Stream = int64(n)
		case num == 4 && typ == protowire.BytesType:
			l.Msg = append([]byte(nil), v...)
		}
		return nil
	})
	return l, err
}

// fields calls f with each field of the message b: its number, wire type
// and value (a varint's encoding, or a length-delimited field's bytes).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			var m int
			if v, m = protowire.ConsumeBytes(b); m < 0 {
				return protowire.ParseError(m)
			}
			n = m
		} else {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			v = b[:n]
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type nopSink struct{}

func (nopSink) Emit(string, string, any) {}

var testType = agentproto.JobType[agentproto.ServicePayload, agentproto.UnitState]{Name: "test.unit"}

// runTest registers h for testType with opts and runs one job with payload.
func runTest(t *testing.T, payload string, h func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error),
	opts ...agent.HandleOption) (any, error) {
	t.Helper()
	r := agent.Registry{}
	agent.Handle(r, testType, h, opts...)
	var raw json.RawMessage
	if payload != "" {
		raw = json.RawMessage(payload)
	}
	data, output, err := r[testType.Name].Run(context.Background(),
		agentproto.Job{ID: "job_1", Type: testType.Name, Payload: raw}, map[string]string{"k": "v"}, nopSink{})
	if output != nil {
		t.Errorf("output %v, want none", output)
	}
	return data, err
}

func TestHandle(t *testing.T) {
	echo := func(_ context.Context, c agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
		if c.Job.ID != "job_1" || c.Secrets["k"] != "v" || c.Events == nil {
			t.Errorf("call %+v", c)
		}
		return agentproto.UnitState{Unit: c.Payload.Unit}, nil
	}
	data, err := runTest(t, `{"unit":"a.service","future_field":1}`, echo)
	if err != nil || !reflect.DeepEqual(data, agentproto.UnitState{Unit: "a.service"}) {
		t.Errorf("got %#v, %v, want the unit's state", data, err)
	}

	for payload, want := range map[string]string{
		"":       "invalid test.unit payload: missing",
		"null":   "invalid test.unit payload: missing",
		`"unit"`: "invalid test.unit payload: json: cannot unmarshal string into Go value of type agentproto.ServicePayload",
	} {
		data, err := runTest(t, payload, func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
			t.Fatal("the handler ran on an invalid payload")
			return agentproto.UnitState{}, nil
		})
		if err == nil || err.Error() != want || data != nil {
			t.Errorf("payload %q: got %#v, %v, want no data and %q", payload, data, err, want)
		}
	}

	boom := errors.New("boom")
	t.Run("FailedWithData", func(t *testing.T) {
		data, err := runTest(t, `{}`, func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
			return agentproto.UnitState{ActiveState: "failed"}, boom
		})
		if !errors.Is(err, boom) || !reflect.DeepEqual(data, agentproto.UnitState{ActiveState: "failed"}) {
			t.Errorf("got %#v, %v, want the partial state and boom", data, err)
		}
	})
	t.Run("FailedWithoutData", func(t *testing.T) {
		data, err := runTest(t, `{}`, func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
			return agentproto.UnitState{}, boom
		})
		if !errors.Is(err, boom) || data != nil {
			t.Errorf("got %#v, %v, want no data and boom", data, err)
		}
	})
	t.Run("Failure", func(t *testing.T) {
		data, err := runTest(t, `{}`, func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
			return agentproto.UnitState{Unit: "ignored"}, &agent.Failure{Err: boom, Data: "why"}
		})
		if !errors.Is(err, boom) || err.Error() != "boom" || data != "why" {
			t.Errorf("got %#v, %v, want the failure's data", data, err)
		}
	})
	t.Run("FailWith", func(t *testing.T) {
		fail := agent.FailWith(func(err error) *agent.Failure {
			return &agent.Failure{Err: errors.New("wrapped: " + err.Error()), Data: map[string]string{"message": err.Error()}}
		})
		data, err := runTest(t, `{}`, func(context.Context, agent.Call[agentproto.ServicePayload]) (agentproto.UnitState, error) {
			return agentproto.UnitState{Unit: "ignored"}, boom
		}, fail)
		if err == nil || err.Error() != "wrapped: boom" || !reflect.DeepEqual(data, map[string]string{"message": "boom"}) {
			t.Errorf("got %#v, %v, want the failure made of boom", data, err)
		}
		data, err = runTest(t, "", nil, fail)
		if err == nil || err.Error() != "wrapped: invalid test.unit payload: missing" ||
			!reflect.DeepEqual(data, map[string]string{"message": "invalid test.unit payload: missing"}) {
			t.Errorf("invalid payload: got %#v, %v, want the failure made of its error", data, err)
		}
	})
	t.Run("PayloadFailure", func(t *testing.T) {
		data, err := runTest(t, "[]", nil, agent.PayloadFailure("none compared"))
		if err == nil || data != "none compared" {
			t.Errorf("got %#v, %v, want the invalid payload's data", data, err)
		}
	})
	t.Run("OptionalPayload", func(t *testing.T) {
		data, err := runTest(t, "", echo, agent.OptionalPayload())
		if err != nil || !reflect.DeepEqual(data, agentproto.UnitState{}) {
			t.Errorf("got %#v, %v, want the zero payload's state", data, err)
		}
		if _, err := runTest(t, "[]", echo, agent.OptionalPayload()); err == nil {
			t.Error("an invalid optional payload was accepted")
		}
	})
	t.Run("Duplicate", func(t *testing.T) {
		r := agent.Registry{}
		agent.Handle(r, testType, echo)
		defer func() {
			if recover() == nil {
				t.Error("a second handler of the same type did not panic")
			}
		}()
		agent.Handle(r, testType, echo)
	})
}

package jobs

import (
	"encoding/json"
	"testing"
)

func TestErrorClass(t *testing.T) {
	for text, want := range map[string]string{
		ErrAgentLost:                    ErrAgentLost,
		ErrTimedOut:                     ErrTimedOut,
		ErrServerRevoked:                ErrServerRevoked,
		"cancelled":                     "cancelled",
		"cancelled: server_revoked":     "cancelled",
		"failed":                        "failed",
		"journalctl: password=hunter2":  "failed",
		"":                              "failed",
		"agent_lost and then some text": "failed",
	} {
		if got := ErrorClass(text); got != want {
			t.Errorf("ErrorClass(%q): got %q, want %q", text, got, want)
		}
	}
}

func TestJobFor(t *testing.T) {
	text := "journalctl: password=hunter2"
	j := Job{ID: "job_1", ServerID: "srv_1", Type: "service.logs", Status: Failed, Payload: json.RawMessage(`{"unit":"a.service"}`),
		Error: &text, Data: json.RawMessage(`{"lines":["hunter2"]}`), Output: json.RawMessage(`"hunter2"`)}

	a := j.For(AdminReader)
	if a.Error == nil || *a.Error != text || a.ErrorClass == nil || *a.ErrorClass != "failed" || a.Data == nil || a.Output == nil ||
		a.Payload == nil || a.Redacted {
		t.Fatalf("administrator's view: %+v", a)
	}
	for _, r := range []Reader{MemberReader, Reader(0)} {
		m := j.For(r)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if m.Error == nil || *m.Error != "failed" || m.ErrorClass == nil || *m.ErrorClass != "failed" || m.Data != nil || m.Output != nil ||
			m.Payload != nil || !m.Redacted || m.ID != j.ID || m.Type != j.Type || m.Status != j.Status {
			t.Fatalf("member's view: %s", b)
		}
	}
	if got := j.Error; *got != text || j.Data == nil {
		t.Fatal("For changed the job it was called on")
	}
	ok := Job{Status: Succeeded}
	if v := ok.For(MemberReader); v.Error != nil || v.ErrorClass != nil {
		t.Fatalf("a job without error: %+v", v)
	}
	ev := []Event{{Seq: 1, Message: "hunter2"}}
	if got := EventsFor(MemberReader, ev); got == nil || len(got) != 0 {
		t.Fatalf("member's events: %+v", got)
	}
	if got := EventsFor(AdminReader, ev); len(got) != 1 {
		t.Fatalf("administrator's events: %+v", got)
	}
	if got := EventsFor(AdminReader, nil); got == nil {
		t.Fatal("administrator's events of a job without any: nil, want an empty list")
	}
}

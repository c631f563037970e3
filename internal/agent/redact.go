package agent

import (
	"bytes"
	"encoding/json"
	"strings"
)

// redactedMark replaces secret values in what the agent sends back.
const redactedMark = "[REDACTED]"

// minRedactLen: shorter secret values are not masked (masking "1" or
// "true" would garble everything).
const minRedactLen = 6

// redactor masks a job's secret values in event messages, event data,
// errors and results, as a safety net for executors that echo them.
type redactor struct {
	raw  []string // secret values
	json [][]byte // the same, as they appear inside a JSON string
}

func newRedactor(secrets map[string]string) *redactor {
	r := &redactor{}
	for _, v := range secrets {
		if len(v) < minRedactLen {
			continue
		}
		r.raw = append(r.raw, v)
		q, _ := json.Marshal(v)
		r.json = append(r.json, q[1:len(q)-1])
	}
	return r
}

func (r *redactor) string(s string) string {
	if r == nil {
		return s
	}
	for _, v := range r.raw {
		s = strings.ReplaceAll(s, v, redactedMark)
	}
	return s
}

// jsonBytes masks secret values inside encoded JSON.
func (r *redactor) jsonBytes(b []byte) []byte {
	if r == nil {
		return b
	}
	for _, v := range r.json {
		if bytes.Contains(b, v) {
			b = bytes.ReplaceAll(b, v, []byte(redactedMark))
		}
	}
	return b
}

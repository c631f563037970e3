package traffic

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/atomicfile"
)

// stateName is the reporter's file in the state directory.
const stateName = "traffic.json"

// stateVersion changes when the file's meaning does; a file of another
// version is ignored.
const stateVersion = 1

// state is what survives a restart: how far the access log was read and
// the aggregates of exactly the lines before that point that are still
// held (open minutes and minutes not accepted yet), saved together.
type state struct {
	Version int       `json:"version"`
	Log     string    `json:"log"`
	File    *position `json:"file,omitempty"`
	// Latest is the newest minute seen, Unix seconds.
	Latest int64 `json:"latest_minute"`
	// NotBefore, Unix seconds, is the backfill limit of the first start.
	NotBefore int64         `json:"not_before,omitempty"`
	Minutes   []stateMinute `json:"minutes"`
}

type stateMinute struct {
	Host    string     `json:"host"`
	Minute  int64      `json:"minute"` // Unix seconds
	Count   int64      `json:"count"`
	S2      int64      `json:"s2,omitempty"`
	S3      int64      `json:"s3,omitempty"`
	S4      int64      `json:"s4,omitempty"`
	S5      int64      `json:"s5,omitempty"`
	Bytes   int64      `json:"bytes,omitempty"`
	Buckets [][2]int64 `json:"buckets"` // [index, count]
	Dirty   bool       `json:"dirty,omitempty"`
}

func (r *Reporter) statePath() string { return filepath.Join(r.opts.StateDir, stateName) }

// snapshot captures the reader's position and the aggregates.
func (r *Reporter) snapshot() state {
	s := state{Version: stateVersion, Log: r.opts.LogPath, Latest: r.agg.latest, Minutes: []stateMinute{}}
	if !r.agg.notBefore.IsZero() {
		s.NotBefore = r.agg.notBefore.Unix()
	}
	if r.tail.f != nil {
		pos := r.tail.pos
		s.File = &pos
	} else if r.tail.resume != nil {
		pos := *r.tail.resume
		s.File = &pos
	}
	for k, m := range r.agg.minutes {
		sm := stateMinute{
			Host: k.host, Minute: k.minute, Count: m.count, S2: m.s2, S3: m.s3, S4: m.s4, S5: m.s5,
			Bytes: m.bytes, Dirty: m.dirty, Buckets: make([][2]int64, len(m.dur)),
		}
		for i, b := range m.dur {
			sm.Buckets[i] = [2]int64{int64(b.Idx), b.N}
		}
		s.Minutes = append(s.Minutes, sm)
	}
	return s
}

// save writes the state atomically (a temporary file renamed over it).
func (r *Reporter) save() error {
	b, err := json.Marshal(r.snapshot())
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(r.statePath(), b, 0o600); err != nil {
		return fmt.Errorf("writing traffic state: %w", err)
	}
	return nil
}

// restore loads the saved state; it reports false when there is none to
// use (first start, another log file, or unreadable).
func (r *Reporter) restore() bool {
	b, err := os.ReadFile(r.statePath())
	if os.IsNotExist(err) {
		return false
	}
	var s state
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || s.Version != stateVersion {
		r.log.Warn("traffic state unreadable; starting over", "path", r.statePath(), "err", err, "version", s.Version)
		return false
	}
	if s.Log != r.opts.LogPath {
		r.log.Info("traffic state is of another access log; starting over", "path", r.statePath(), "log", s.Log)
		return false
	}
	r.tail.resume = s.File
	r.agg.latest = s.Latest
	if s.NotBefore != 0 {
		r.agg.notBefore = time.Unix(s.NotBefore, 0)
	}
	for _, sm := range s.Minutes {
		m := &minute{
			host: sm.Host, start: time.Unix(sm.Minute, 0).UTC(), count: sm.Count,
			s2: sm.S2, s3: sm.S3, s4: sm.S4, s5: sm.S5, bytes: sm.Bytes, dirty: sm.Dirty,
		}
		for _, b := range sm.Buckets {
			m.dur = append(m.dur, bucket{Idx: int32(b[0]), N: b[1]})
		}
		slices.SortFunc(m.dur, func(x, y bucket) int { return cmp.Compare(x.Idx, y.Idx) })
		r.agg.minutes[key{sm.Host, sm.Minute}] = m
	}
	return true
}

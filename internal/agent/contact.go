package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capstan-dev/capstan/internal/agent/atomicfile"
)

// ContactFile, in the state directory, says which process runs the agent
// and when it last reached the control plane, for capstan-agent status.
const ContactFile = "contact.json"

// Contact is what ContactFile holds.
type Contact struct {
	PID       int       `json:"pid"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	// LastContactAt is the last heartbeat the control plane answered;
	// zero before the first.
	LastContactAt time.Time `json:"last_contact_at"`
	// LastError is why the last heartbeat failed, if it did (cleared by
	// the next one that succeeds), and LastErrorAt when.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at"`
}

// contactLog keeps ContactFile up to date; a nil one does nothing.
type contactLog struct {
	path string
	c    Contact
}

func newContactLog(stateDir, version string) *contactLog {
	if stateDir == "" {
		return nil
	}
	return &contactLog{path: filepath.Join(stateDir, ContactFile),
		c: Contact{PID: os.Getpid(), Version: version, StartedAt: processStart.UTC()}}
}

// record notes a heartbeat's outcome. Called by the heartbeat loop only.
func (l *contactLog) record(now time.Time, err error) error {
	if l == nil {
		return nil
	}
	if err == nil {
		l.c.LastContactAt, l.c.LastError, l.c.LastErrorAt = now.UTC(), "", time.Time{}
	} else {
		l.c.LastError, l.c.LastErrorAt = err.Error(), now.UTC()
	}
	b, err := json.Marshal(l.c)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(l.path, b, 0o600)
}

// ReadContact reads the state directory's ContactFile and reports whether
// the process it names is still a running agent.
func ReadContact(stateDir string) (c Contact, running bool, err error) {
	b, err := os.ReadFile(filepath.Join(stateDir, ContactFile))
	if err != nil {
		return Contact{}, false, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Contact{}, false, fmt.Errorf("%s: %w", filepath.Join(stateDir, ContactFile), err)
	}
	return c, agentProcess(c.PID), nil
}

// agentProcess reports whether pid is a live capstan-agent process (not
// another program that reused the id).
func agentProcess(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return strings.Contains(filepath.Base(argv0), "capstan-agent")
}

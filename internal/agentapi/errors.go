package agentapi

import "github.com/capstan-dev/capstan/internal/fault"

func invalidWait() error {
	return fault.Invalidf("wait_seconds", "must be between 0 and 30")
}

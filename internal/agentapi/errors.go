package agentapi

import (
	"errors"

	"github.com/capstan-dev/capstan/internal/fault"
)

var errNoDatabases = errors.New("agentapi: Deps.Databases is not set")

func invalidWait() error {
	return fault.Invalidf("wait_seconds", "must be between 0 and 30")
}

package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/capstan-dev/capstan/internal/agentapi"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

type openapiCmd struct{}

// Run prints the OpenAPI document that `capstan serve` serves at
// /openapi.json (without the servers list, which depends on the public
// URL). The web console's API types are generated from it.
func (openapiCmd) Run() error {
	api := httpapi.New(httpapi.Deps{Version: version, Logger: slog.New(slog.DiscardHandler)}, agentapi.Mount(agentapi.Deps{}), httpapi.CloudDrive(nil))
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("the OpenAPI document answered %d", rec.Code)
	}
	_, err := os.Stdout.Write(rec.Body.Bytes())
	return err
}

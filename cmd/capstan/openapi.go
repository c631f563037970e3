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

type openapiCmd struct {
	SpecVersion string `name:"spec-version" enum:"3.1,3.0" default:"3.1" help:"OpenAPI version of the document: 3.1 (served at /openapi.json) or 3.0 (/openapi-3.0.json)."`
}

// Run prints the OpenAPI document that `capstan serve` serves at
// /openapi.json (without the servers list, which depends on the public
// URL). The web console's API types and the command line's client are
// generated from it.
func (c openapiCmd) Run() error {
	api := httpapi.New(httpapi.Deps{Version: version, Logger: slog.New(slog.DiscardHandler)}, agentapi.Mount(agentapi.Deps{}), httpapi.CloudDrive(nil))
	rec := httptest.NewRecorder()
	path := "/openapi.json"
	if c.SpecVersion == "3.0" {
		path = "/openapi-3.0.json"
	}
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("the OpenAPI document answered %d", rec.Code)
	}
	_, err := os.Stdout.Write(rec.Body.Bytes())
	return err
}

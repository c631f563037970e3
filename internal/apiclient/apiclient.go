// Package apiclient is the typed client of the Capstan API that the
// command line uses, generated from the API's OpenAPI document.
package apiclient

//go:generate sh -c "go run ../../cmd/capstan openapi --spec-version 3.0 > openapi-3.0.json.tmp && go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml openapi-3.0.json.tmp; s=$?; rm -f openapi-3.0.json.tmp; exit $s"

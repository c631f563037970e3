package agentapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

var errNoBackups = errors.New("agentapi: no backups service")

type storageGrantInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body agentproto.StorageGrantRequest
}

type storageGrantOutput struct {
	Body agentproto.StorageGrant
}

type storageObjectInput struct {
	ID  string `path:"id" maxLength:"64"`
	Key string `query:"key" required:"true" maxLength:"1024" doc:"The object's key: the job's key"`
}

// registerStorage serves the grants of backup jobs' storage requests: a
// server holds no storage credential, and asks here for each request.
func registerStorage(s *httpapi.Server, d Deps) {
	tags := []string{"Agent protocol"}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-storage-grant", Method: http.MethodPost, Path: "/agent/v1/jobs/{id}/storage", Tags: tags,
		Summary: "Grant one request of a running backup job to the backup storage",
		Description: "For S3 storage, the answer is the request to make (method and URL), presigned with SigV4 query " +
			"authentication, valid until 5 minutes after the job's deadline: op put, create_upload, upload_part, " +
			"complete_upload, abort_upload, get, head, delete, or list (signed with the key as the listing's prefix). " +
			"For the cloud drive, put answers the URL of a resumable upload session of the key's file; head, list and " +
			"delete are done by the control plane and answered with their outcome. Only for a running backup job of this " +
			"server, only for its own object (its key, and the key's .sha256 sidecar on S3) and only for what the job " +
			"type does (a verification reads, a deletion reads and deletes); anything else is 403.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusBadGateway},
	}, httpapi.Agent, func(ctx context.Context, in *storageGrantInput) (*storageGrantOutput, error) {
		b := d.Backups
		if b == nil {
			return nil, errNoBackups
		}
		g, err := b.GrantStorage(ctx, httpapi.AgentServer(ctx).ID, in.ID, in.Body)
		if err != nil {
			return nil, err
		}
		return &storageGrantOutput{Body: g}, nil
	})
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-storage-object", Method: http.MethodGet, Path: "/agent/v1/jobs/{id}/storage", Tags: tags,
		Summary: "Stream a cloud drive backup object of a running backup job",
		Description: "The content of the job's own object in the cloud drive, streamed from the provider with its " +
			"Content-Length. Another server's job, a job that is not running, another key, or a job that does not read " +
			"is 403; S3 objects are read with a presigned GET instead (409).",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusBadGateway},
		Responses: map[string]*huma.Response{"200": {Description: "The object's content",
			Content: map[string]*huma.MediaType{agentproto.ArtifactContentType: {Schema: &huma.Schema{Type: "string", Format: "binary"}}}}},
	}, httpapi.Agent, func(ctx context.Context, in *storageObjectInput) (*huma.StreamResponse, error) {
		b := d.Backups
		if b == nil {
			return nil, errNoBackups
		}
		rc, size, err := b.StorageObject(ctx, httpapi.AgentServer(ctx).ID, in.ID, in.Key)
		if err != nil {
			return nil, err
		}
		return streamFile(ctx, s, rc, size, ""), nil
	})
}

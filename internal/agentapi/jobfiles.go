// The files and objects of running jobs: database export uploads and
// import downloads, and the storage a backup job reads and writes.

package agentapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/httpapi"
)

type artifactUploadInput struct {
	httpapi.StreamedBody
	ID string `path:"id" maxLength:"64"`
}

type artifactReceiptOutput struct {
	Body agentproto.ArtifactReceipt
}

// registerArtifacts serves the streamed files of database export and
// import jobs.
func registerArtifacts(s *httpapi.Server, d Deps) {
	tags := []string{"Agent protocol"}
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-upload-artifact", Method: http.MethodPut, Path: "/agent/v1/jobs/{id}/artifact", Tags: tags,
		Summary: "Upload a database export (streamed, encrypted on arrival)",
		Description: "The body is the .sql.gz of a running db.export job of this server, streamed; the control plane encrypts it " +
			"as it arrives and answers its size and SHA-256. Another server's job, or a job that is not running, is 403; a " +
			"second upload of the same job is 409; over the export limit is 413.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge},
		RequestBody: &huma.RequestBody{Required: true, Description: "The gzip-compressed dump",
			Content: map[string]*huma.MediaType{agentproto.ArtifactContentType: {Schema: &huma.Schema{Type: "string", Format: "binary"}}}},
	}, httpapi.Agent, func(ctx context.Context, in *artifactUploadInput) (*artifactReceiptOutput, error) {
		dbs := d.Databases
		if dbs == nil {
			return nil, errNoDatabases
		}
		r, err := dbs.ReceiveExport(ctx, httpapi.AgentServer(ctx).ID, in.ID, in.Reader())
		if err != nil {
			return nil, err
		}
		return &artifactReceiptOutput{Body: r}, nil
	})
	httpapi.Register(s, huma.Operation{
		OperationID: "agent-download-artifact", Method: http.MethodGet, Path: "/agent/v1/jobs/{id}/artifact", Tags: tags,
		Summary: "Download the file a database import loads",
		Description: "Streams the uploaded file of a running db.import job of this server, decrypted, with its Content-Length " +
			"and SHA-256 (Repr-Digest). Another server's job, or a job that is not running, is 403.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusGone},
		Responses: map[string]*huma.Response{"200": {Description: "The file",
			Content: map[string]*huma.MediaType{agentproto.ArtifactContentType: {Schema: &huma.Schema{Type: "string", Format: "binary"}}}}},
	}, httpapi.Agent, func(ctx context.Context, in *jobIDInput) (*huma.StreamResponse, error) {
		dbs := d.Databases
		if dbs == nil {
			return nil, errNoDatabases
		}
		rc, a, err := dbs.SendImport(ctx, httpapi.AgentServer(ctx).ID, in.ID)
		if err != nil {
			return nil, err
		}
		return streamFile(ctx, s, rc, a.Size, a.SHA256), nil
	})
}

// streamFile answers rc's bytes as an artifact: with its Content-Length
// when size is known (not negative) and its Repr-Digest when sha256 is
// given. It closes rc.
func streamFile(ctx context.Context, s *httpapi.Server, rc io.ReadCloser, size int64, sha256 string) *huma.StreamResponse {
	log := s.Logger()
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		defer rc.Close()
		hctx.SetHeader("Content-Type", agentproto.ArtifactContentType)
		if size >= 0 {
			hctx.SetHeader("Content-Length", strconv.FormatInt(size, 10))
		}
		if sha256 != "" {
			hctx.SetHeader("Repr-Digest", httpapi.ContentDigest(sha256))
		}
		hctx.SetStatus(http.StatusOK)
		httpapi.StreamBody(hctx, rc, func(msg string, args ...any) { log.WarnContext(ctx, msg, args...) })
	}}
}

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

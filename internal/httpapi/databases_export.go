package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/capstan-dev/capstan/internal/databases"
)

// StreamIdle is how long a streamed request or response may go without a
// byte moving before the connection is dropped. The server's own read and
// write timeouts bound whole requests; a stream of gigabytes takes longer,
// so it lifts them and keeps this deadline instead, renewed as bytes move.
const StreamIdle = 2 * time.Minute

// StreamedBody, embedded in an operation's input, gives the handler the
// request body as a stream: huma does not read it (the input has no Body
// field), and Reader renews the connection's read deadline as bytes
// arrive. (Not named RawBody: huma reads a field of that name, promoted
// ones too, as the whole body.)
type StreamedBody struct {
	req *http.Request
	w   http.ResponseWriter
}

// Resolve captures the request; huma calls it before the handler.
func (b *StreamedBody) Resolve(ctx huma.Context) []error {
	b.req, b.w = humago.Unwrap(ctx)
	return nil
}

// Length is the request's Content-Length, -1 when it did not say.
func (b *StreamedBody) Length() int64 { return b.req.ContentLength }

// Reader returns the body.
func (b *StreamedBody) Reader() io.Reader {
	return &idleReader{r: b.req.Body, rc: http.NewResponseController(b.w)}
}

// idleReader renews the read deadline before every read.
type idleReader struct {
	r  io.Reader
	rc *http.ResponseController
}

func (i *idleReader) Read(p []byte) (int, error) {
	_ = i.rc.SetReadDeadline(time.Now().Add(StreamIdle)) // not every writer supports it (tests' recorders)
	return i.r.Read(p)
}

// idleWriter renews the write deadline before every write.
type idleWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (i *idleWriter) Write(p []byte) (int, error) {
	_ = i.rc.SetWriteDeadline(time.Now().Add(StreamIdle))
	return i.w.Write(p)
}

// StreamBody copies r to the response of a streaming operation, renewing
// the write deadline as bytes go. A copy that fails after the status was
// sent aborts the connection, so the client sees a broken transfer rather
// than a short file that looks whole.
func StreamBody(ctx huma.Context, r io.Reader, log func(msg string, args ...any)) {
	_, w := humago.Unwrap(ctx)
	dst := &idleWriter{w: ctx.BodyWriter(), rc: http.NewResponseController(w)}
	if _, err := io.CopyBuffer(dst, r, make([]byte, 256<<10)); err != nil {
		if ctx.Context().Err() == nil {
			log("streaming a response failed", "err", err.Error())
		}
		panic(http.ErrAbortHandler)
	}
}

// ContentDigest is an RFC 9530 Repr-Digest value of a hex SHA-256.
func ContentDigest(hexSum string) string {
	b, err := hex.DecodeString(hexSum)
	if err != nil {
		return ""
	}
	return "sha-256=:" + base64.StdEncoding.EncodeToString(b) + ":"
}

type exportInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Database string `json:"database,omitempty" maxLength:"64" doc:"The database to dump; the instance's initial database when absent. ASCII letters, digits, '_', '$' and '-', not starting with '-'"`
	}
}

type exportDownloadInput struct {
	ID    string `path:"id" maxLength:"64"`
	JobID string `path:"job_id" maxLength:"64"`
}

type importInput struct {
	StreamedBody
	ID       string `path:"id" maxLength:"64"`
	Database string `query:"database" maxLength:"64" doc:"The database to load into (it must exist); the instance's initial database when absent"`
}

func (s *Server) registerDatabaseExports() {
	tags := []string{"Databases"}
	op(s, huma.Operation{
		OperationID: "export-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/export", Tags: tags,
		Summary: "Dump one database as .sql.gz",
		Description: "Queues db.export (202) on a ready SQL instance. The agent runs the engine's dump tool (pg_dump, mariadb-dump or " +
			"mysqldump) inside a managed instance's container, so its version is the engine's; for an external instance a client " +
			"of the same major version on the server, else the engine's image in a throwaway container (the job's data and events " +
			"say which). It gzip-compresses the dump and streams it to the control plane, which encrypts it as it arrives; no " +
			"plaintext copy is written on either side. Download it with GET …/exports/{job_id} once the job succeeded, until it " +
			"expires (7 days by default). 422 for a key-value instance or a bad database name, 409 for an instance that is not ready.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *exportInput) (*acceptedOutput, error) {
		j, err := s.deps.Databases.Export(ctx, caller(ctx), in.ID, in.Body.Database)
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "download-database-export", Method: http.MethodGet, Path: "/api/v1/databases/{id}/exports/{job_id}", Tags: tags,
		Summary: "Download a finished export",
		Description: "Streams the export of a succeeded db.export job, decrypted, as application/gzip (a .sql.gz file), with its " +
			"Content-Length and its SHA-256 in Repr-Digest. Each download is recorded in the audit log " +
			"(database.export.downloaded) with who made it and from which address, before a byte is sent. 404 for a job that is " +
			"not an export of this instance, 409 while it runs or when it failed, 410 once it expired.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusGone},
		Responses: map[string]*huma.Response{"200": {Description: "The export, a gzip-compressed SQL dump",
			Content: map[string]*huma.MediaType{"application/gzip": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}}},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *exportDownloadInput) (*huma.StreamResponse, error) {
		d, err := s.deps.Databases.Download(ctx, caller(ctx), in.ID, in.JobID)
		if err != nil {
			return nil, err
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			defer d.Close()
			hctx.SetHeader("Content-Type", "application/gzip")
			hctx.SetHeader("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, d.Name))
			hctx.SetHeader("Content-Length", strconv.FormatInt(d.Artifact.Size, 10))
			hctx.SetHeader("Repr-Digest", ContentDigest(d.Artifact.SHA256))
			hctx.SetStatus(http.StatusOK)
			StreamBody(hctx, d, func(msg string, args ...any) { s.log.WarnContext(ctx, msg, args...) })
		}}, nil
	}))
	op(s, huma.Operation{
		OperationID: "import-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/import", Tags: tags,
		Summary: "Load a file into a database",
		Description: "The request body is the file: plain SQL (.sql), gzip-compressed SQL (.sql.gz) or, for PostgreSQL, a " +
			"custom-format dump (pg_dump -Fc); the format is detected from its content. It is encrypted as it arrives and " +
			"stored until the db.import job (202) that loads it ends. PostgreSQL loads plain SQL in one transaction with " +
			"ON_ERROR_STOP and a custom-format dump with pg_restore --single-transaction: if anything fails, nothing is " +
			"applied and the job fails with the engine's message. MySQL/MariaDB run the file statement by statement and stop " +
			"at the first error: what ran before it stays (DDL commits implicitly there), so a failed load can be partial. " +
			"The load runs in the instance's container (managed) or a throwaway container of the engine's image (external). " +
			"413 over the upload limit (10 GiB by default, --database-import-max-size), checked against Content-Length first " +
			"and counted while the body arrives; 422 for an empty body, a bad database name, a key-value instance, or a " +
			"custom-format dump for MySQL/MariaDB; 409 for an instance that is not ready.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge},
		RequestBody: &huma.RequestBody{Required: true, Description: "The file to load: .sql, .sql.gz or a PostgreSQL custom-format dump",
			Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *importInput) (*acceptedOutput, error) {
		j, err := s.deps.Databases.Import(ctx, caller(ctx), in.ID, databases.ImportRequest{Database: in.Database, Body: in.Reader(),
			DeclaredSize: in.Length()})
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
}

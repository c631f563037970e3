package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/databases"
)

var errNoDatabases = errors.New("httpapi: Deps.Databases is not set")

// maxQueryBody bounds a query console body: a statement of up to 256 KiB.
const maxQueryBody = 512 << 10

type databaseIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type enginesOutput struct {
	Body struct {
		Engines []databases.Engine `json:"engines"`
	}
}

type databaseListOutput struct {
	Body struct {
		Databases []databases.Detail `json:"databases" doc:"By name"`
	}
}

type registerExternalInput struct {
	Body struct {
		Name     string `json:"name" maxLength:"63" doc:"DNS label: 1 to 63 lowercase letters, digits and '-', not at either end; unique"`
		ServerID string `json:"server_id" maxLength:"64" doc:"The enrolled server whose agent connects to the instance"`
		Engine   string `json:"engine" maxLength:"32" doc:"postgres, mysql, mariadb, redis or valkey"`
		Host     string `json:"host" maxLength:"253" doc:"Host name or IP address as the server reaches it"`
		Port     *int   `json:"port,omitempty" minimum:"1" maximum:"65535" doc:"1 to 65535; the engine's default port when absent"`
		Username string `json:"username,omitempty" maxLength:"128" doc:"Required for SQL engines; default for Redis/Valkey when absent"`
		Password string `json:"password,omitempty" maxLength:"1024" doc:"Stored encrypted; sent to the agent only in the job's secrets; never returned except by the audited connection read"`
		Database string `json:"database,omitempty" maxLength:"64" doc:"SQL engines: the database to connect to (required). Key-value engines: leave out"`
		TLSMode  string `json:"tls_mode" maxLength:"16" doc:"disable, require, verify-ca or verify-full (PostgreSQL sslmode semantics; mapped for MySQL/MariaDB and Redis/Valkey)"`
		CA       string `json:"ca,omitempty" maxLength:"65536" doc:"PEM CA certificates for verify-ca and verify-full; the system's roots when absent"`
	}
}

type registrationOutput struct {
	Location string `header:"Location" doc:"The instance's URL"`
	Body     databases.Registration
}

type databaseTLSInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		TLSMode string `json:"tls_mode" maxLength:"16" doc:"disable, require, verify-ca or verify-full"`
		CA      string `json:"ca,omitempty" maxLength:"65536" doc:"PEM CA certificates for verify-ca and verify-full"`
	}
}

type queryInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		SQL            string `json:"sql" doc:"One statement, at most 256 KiB"`
		Database       string `json:"database,omitempty" maxLength:"64" doc:"The database to run it in; the instance's initial database when absent"`
		ReadOnly       *bool  `json:"readonly,omitempty" doc:"Default true: the engine itself keeps the transaction read-only (a write fails with the engine's error)"`
		MaxRows        *int   `json:"max_rows,omitempty" minimum:"1" maximum:"1000" doc:"1 to 1000; default 100 when absent. Rows past it are not fetched from the engine (truncated: true)"`
		TimeoutSeconds *int   `json:"timeout_seconds,omitempty" minimum:"1" maximum:"300" doc:"Statement timeout, 1 to 300; default 30 when absent"`
	}
}

type exploreInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		What     string `json:"what" maxLength:"16" doc:"databases, users, stats, tables or columns"`
		Database string `json:"database,omitempty" maxLength:"64" doc:"tables and columns: the database; the initial database when absent"`
		Schema   string `json:"schema,omitempty" maxLength:"64" doc:"tables and columns, PostgreSQL only: one schema; every schema but the system ones when absent"`
		Table    string `json:"table,omitempty" maxLength:"64" doc:"columns: the table (required)"`
	}
}

type kvInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Action   string   `json:"action" maxLength:"16" doc:"info, scan, get, delete or acl_list"`
		DB       *int     `json:"db,omitempty" minimum:"0" maximum:"15" doc:"Logical database number, 0 to 15; 0 when absent"`
		Cursor   string   `json:"cursor,omitempty" maxLength:"20" doc:"scan: the cursor a previous scan returned; absent or 0 to start"`
		Match    string   `json:"match,omitempty" maxLength:"4096" doc:"scan: a glob pattern; * when absent"`
		Count    *int     `json:"count,omitempty" minimum:"1" maximum:"1000" doc:"scan: keys per step (a hint), 1 to 1000; default 100"`
		Key      string   `json:"key,omitempty" maxLength:"4096" doc:"get: the key"`
		MaxItems *int     `json:"max_items,omitempty" minimum:"1" maximum:"10000" doc:"get: items of a hash, list, set, sorted set or stream returned at most, 1 to 10000; default 100"`
		MaxBytes *int     `json:"max_bytes,omitempty" minimum:"1" maximum:"524288" doc:"get: bytes of a string returned at most, 1 to 524288; default 65536"`
		Keys     []string `json:"keys,omitempty" maxItems:"1000" doc:"delete: the keys, explicitly (1 to 1000)"`
	}
}

type databaseJobInput struct {
	ID    string `path:"id" maxLength:"64"`
	JobID string `path:"job_id" maxLength:"64"`
	Wait  int    `query:"wait" minimum:"0" maximum:"30" doc:"Seconds to wait for the job to end, 0 to 30: the call answers as soon as the job is finished, or after this long with its state then. 0 (the default) answers at once"`
}

func (s *Server) registerDatabases() {
	tags := []string{"Databases"}
	op(s, huma.Operation{
		OperationID: "list-database-engines", Method: http.MethodGet, Path: "/api/v1/databases/engines", Tags: tags,
		Summary: "Database engines, their versions and images",
		Description: "Each engine with its kind (sql or kv), default port, and supported majors newest first (the default marked), " +
			"each with the container image it runs: the official image unless the control plane's --database-images file names another.",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*enginesOutput, error) {
		if s.deps.Databases == nil {
			return nil, errNoDatabases
		}
		out := &enginesOutput{}
		out.Body.Engines = s.deps.Databases.Engines()
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "list-databases", Method: http.MethodGet, Path: "/api/v1/databases", Tags: tags,
		Summary:     "Database instances",
		Description: "With their logins' user names, never passwords. Members do not get last_error (a job's output).",
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*databaseListOutput, error) {
		if s.deps.Databases == nil {
			return nil, errNoDatabases
		}
		list, err := s.deps.Databases.List(ctx, reader(ctx))
		if err == nil {
			list, err = narrowList(ctx, s, list, func(d databases.Detail) target { return target{db: d.ID, server: d.ServerID} })
		}
		if err != nil {
			return nil, err
		}
		out := &databaseListOutput{}
		out.Body.Databases = list
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "register-external-database", Method: http.MethodPost, Path: "/api/v1/databases/external", Tags: tags,
		Summary: "Register an external database instance",
		Description: "Stores the instance in state checking and queues db.connect on server_id (202): that server's agent connects " +
			"(the control plane never does). When the job ends the instance is ready, with the version the engine reported, or " +
			"unreachable, with the engine's own error text in last_error; nothing else works on it until it is ready (409). " +
			"PUT …/tls tests it again. The password is stored encrypted and sent to the agent only in the job's secrets.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *registerExternalInput) (*registrationOutput, error) {
		c := caller(ctx)
		b := in.Body
		reg, err := s.deps.Databases.RegisterExternal(ctx, c, databases.NewExternal{Name: b.Name, ServerID: b.ServerID, Engine: b.Engine,
			Host: b.Host, Port: b.Port, Username: b.Username, Password: b.Password, Database: b.Database, TLSMode: b.TLSMode, CA: b.CA})
		if err != nil {
			return nil, err
		}
		return &registrationOutput{Location: "/api/v1/databases/" + reg.Instance.ID, Body: reg}, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-database", Method: http.MethodGet, Path: "/api/v1/databases/{id}", Tags: tags,
		Summary: "A database instance", Errors: []int{http.StatusNotFound},
		Description: "State, engine, version, server, managed or external, and its logins' user names (never passwords). " +
			"Members do not get last_error (a job's output).",
	}, SignedIn, needs(s.hasDatabases, func(ctx context.Context, in *databaseIDInput) (*bodyOutput[databases.Detail], error) {
		return reply(s.deps.Databases.Get(ctx, in.ID, reader(ctx)))
	}))
	op(s, huma.Operation{
		OperationID: "delete-database", Method: http.MethodDelete, Path: "/api/v1/databases/{id}", Tags: tags,
		Summary: "Delete a database instance", Errors: []int{http.StatusNotFound, http.StatusConflict},
		Description: "External (200): deletes the registration and its stored logins and says so; the database server and its " +
			"data are not touched. Jobs already queued on it still run. Managed (202): queues db.remove, which removes the " +
			"container; the data volume is kept unless purge=true (volume_kept says which); the record and its logins go " +
			"when the job succeeded. Backups of the instance are not deleted. 409 while another job of the instance runs.",
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *databaseDeleteInput) (*databaseRemovalOutput, error) {
		d, err := s.deps.Databases.Remove(ctx, caller(ctx), in.ID, in.Purge)
		if err != nil {
			return nil, err
		}
		status := http.StatusOK
		if d.Managed {
			status = http.StatusAccepted
		}
		return &databaseRemovalOutput{Status: status, Body: d}, nil
	}))
	op(s, huma.Operation{
		OperationID: "update-database-tls", Method: http.MethodPut, Path: "/api/v1/databases/{id}/tls", Tags: tags,
		Summary: "Set an external instance's TLS mode and test it again",
		Description: "Stores tls_mode and ca, puts the instance back in state checking and queues db.connect (202), also when " +
			"they are unchanged: this is how an unreachable instance is tried again. 409 for a managed instance.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *databaseTLSInput) (*registrationOutput, error) {
		reg, err := s.deps.Databases.UpdateTLS(ctx, caller(ctx), in.ID, in.Body.TLSMode, in.Body.CA)
		if err != nil {
			return nil, err
		}
		return &registrationOutput{Location: "/api/v1/databases/" + reg.Instance.ID, Body: reg}, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-database-connection", Method: http.MethodGet, Path: "/api/v1/databases/{id}/connection", Tags: tags,
		Summary: "Logins with passwords and connection URLs", Errors: []int{http.StatusNotFound},
		Description: "Every login of the instance with its password and its URL as the instance's server reaches it. Each " +
			"call is recorded in the audit log (database.connection.read) with who made it and from which address.",
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *databaseIDInput) (*bodyOutput[databases.Connection], error) {
		return reply(s.deps.Databases.Connection(ctx, caller(ctx), in.ID))
	}))
	op(s, huma.Operation{
		OperationID: "query-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/query", Tags: tags,
		Summary: "Run one SQL statement",
		Description: "Queues db.query (202) on a ready SQL instance; read the result at GET /api/v1/databases/{id}/jobs/{job_id}" +
			"?wait=30: {columns: [{name, type}], rows, row_count, truncated, rows_affected, duration_ms, notices, ran_as (the login it ran as: read-only statements run as the read-only login capstan_console_ro the agent makes where the engine has such a role)}, or, for a failed " +
			"job, data {error: {code, message, position}} with the engine's error. readonly (default true) is enforced by the " +
			"engine, never by reading the SQL. 422 for a key-value instance, 409 for an instance that is not ready.",
		DefaultStatus: http.StatusAccepted, MaxBodyBytes: maxQueryBody, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *queryInput) (*acceptedOutput, error) {
		c := caller(ctx)
		b := in.Body
		j, err := s.deps.Databases.Query(ctx, c, in.ID, databases.QueryRequest{SQL: b.SQL, Database: b.Database, ReadOnly: b.ReadOnly,
			MaxRows: b.MaxRows, TimeoutSeconds: b.TimeoutSeconds})
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "explore-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/explore", Tags: tags,
		Summary: "Describe a SQL instance",
		Description: "Queues db.explore (202): databases with sizes and owners, users with their grants, stats, tables with " +
			"estimated rows and sizes, or a table's columns with keys and indexes. Read it at the instance's job path. 422 for a " +
			"key-value instance, 409 for an instance that is not ready.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *exploreInput) (*acceptedOutput, error) {
		b := in.Body
		j, err := s.deps.Databases.Explore(ctx, principal(ctx).User.ID, in.ID, databases.ExploreRequest{What: b.What,
			Database: b.Database, Schema: b.Schema, Table: b.Table})
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "kv-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/kv", Tags: tags,
		Summary: "Browse a key-value instance",
		Description: "Queues db.kv (202): info, scan (by cursor, never KEYS), get (type-aware, bounded, with TTL and full size), " +
			"delete (explicit keys; reports how many existed) or acl_list. Read it at the instance's job path. 422 for a SQL " +
			"instance, 409 for an instance that is not ready.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *kvInput) (*acceptedOutput, error) {
		c := caller(ctx)
		b := in.Body
		j, err := s.deps.Databases.KV(ctx, c, in.ID, databases.KVRequest{Action: b.Action, DB: b.DB, Cursor: b.Cursor, Match: b.Match,
			Count: b.Count, Key: b.Key, MaxItems: b.MaxItems, MaxBytes: b.MaxBytes, Keys: b.Keys})
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "get-database-job", Method: http.MethodGet, Path: "/api/v1/databases/{id}/jobs/{job_id}", Tags: tags,
		Summary: "The result of a database job", Errors: []int{http.StatusNotFound},
		Description: "{status, error, data} of a job of this instance (404 for another instance's). With wait, the call answers " +
			"as soon as the job is finished, or after wait seconds with its state then. Members get the job's status and error " +
			"class, not its data or error text (redacted true).",
	}, SignedIn, needs(s.hasDatabases, func(ctx context.Context, in *databaseJobInput) (*bodyOutput[databases.JobResult], error) {
		return reply(s.deps.Databases.Job(ctx, in.ID, in.JobID, time.Duration(in.Wait)*time.Second, reader(ctx)))
	}))
}

// databaseAccepted points the reply of a database call at the instance's
// job path.
func databaseAccepted(instanceID, jobID string, out *acceptedOutput) *acceptedOutput {
	out.Location = "/api/v1/databases/" + instanceID + "/jobs/" + jobID
	return out
}

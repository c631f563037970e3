package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/databases"
)

type createDatabaseInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Name  string `json:"name" maxLength:"128" doc:"ASCII letters, digits and '_', starting with a letter or '_'; at most 63 bytes on PostgreSQL, 64 on MySQL/MariaDB; the engine's own databases are refused"`
		Owner string `json:"owner,omitempty" maxLength:"128" doc:"An existing login to own it (PostgreSQL: OWNER; MySQL/MariaDB: ALL on it); the admin login when absent"`
	}
}

type dropDatabaseInput struct {
	ID   string `path:"id" maxLength:"64"`
	Name string `path:"name" maxLength:"128"`
}

type createLoginInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Username   string `json:"username" maxLength:"128" doc:"ASCII letters, digits and '_', starting with a letter or '_'; at most 63 bytes on PostgreSQL, 32 on MySQL, 80 on MariaDB, 128 on Redis/Valkey; the engine's own names are refused"`
		Database   string `json:"database,omitempty" maxLength:"128" doc:"SQL engines: the existing database the login is for (required). Key-value engines: leave out"`
		Access     string `json:"access" maxLength:"16" doc:"readonly, readwrite or admin (SQL only); see the API guide for the grants each is on each engine"`
		KeyPattern string `json:"key_pattern,omitempty" maxLength:"256" doc:"Key-value engines: the glob of keys the login reaches, e.g. app:* (required). SQL engines: leave out"`
	}
}

type loginSecretOutput struct {
	Location string `header:"Location" doc:"The job's URL at the instance's job path"`
	Body     databases.LoginSecret
}

type rotateLoginInput struct {
	ID           string `path:"id" maxLength:"64"`
	CredentialID string `path:"credential_id" maxLength:"64"`
}

type dropLoginInput struct {
	ID       string `path:"id" maxLength:"64"`
	Username string `path:"username" maxLength:"128"`
}

type attachInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		ApplicationID string `json:"application_id" maxLength:"64" doc:"The application to attach"`
		EnvKey        string `json:"env_key" maxLength:"256" doc:"The env key the application reads the URL from, e.g. DATABASE_URL; not already in its env"`
		Database      string `json:"database,omitempty" maxLength:"128" doc:"SQL engines: the database of the application's login; the instance's initial database when absent. Key-value engines: leave out"`
	}
}

type attachOutput struct {
	Location string `header:"Location" doc:"The job's URL at the instance's job path"`
	Body     databases.AttachResult
}

func (s *Server) registerDatabaseLogins() {
	tags := []string{"Databases"}
	op(s, huma.Operation{
		OperationID: "create-database-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/databases", Tags: tags,
		Summary: "Create a database on an instance",
		Description: "Queues db.database.create (202) on a ready SQL instance; the agent runs it as the admin login. On PostgreSQL " +
			"CONNECT and TEMPORARY are revoked from PUBLIC, so only logins granted it reach the new database. A name the engine would " +
			"not take is 422 before anything is queued; a key-value instance is 422; an instance that is not ready is 409.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *createDatabaseInput) (*acceptedOutput, error) {
		j, err := s.deps.Databases.CreateDatabase(ctx, caller(ctx), in.ID, in.Body.Name, in.Body.Owner)
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "drop-database-database", Method: http.MethodDelete, Path: "/api/v1/databases/{id}/databases/{name}", Tags: tags,
		Summary: "Drop a database of an instance",
		Description: "Queues db.database.drop (202): the database and its data are gone when the job succeeds (its data says " +
			"whether it existed). The instance's initial database, and a database that stored logins are for, are refused (409).",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *dropDatabaseInput) (*acceptedOutput, error) {
		j, err := s.deps.Databases.DropDatabase(ctx, caller(ctx), in.ID, in.Name)
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
	op(s, huma.Operation{
		OperationID: "create-database-login", Method: http.MethodPost, Path: "/api/v1/databases/{id}/users", Tags: tags,
		Summary: "Create a login with an access level",
		Description: "Makes a random password, stores it encrypted with the login in state creating, and queues db.user.create " +
			"(202), which creates the login with the engine's grants for access on its database (SQL) or key pattern " +
			"(Redis/Valkey). The password is in this reply once; later only GET …/connection (audited) shows it. If the job fails " +
			"the login is forgotten. Bad input is 422 naming the field, with nothing stored or queued; a name in use is 409.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *createLoginInput) (*loginSecretOutput, error) {
		c := caller(ctx)
		b := in.Body
		out, err := s.deps.Databases.CreateLogin(ctx, c, in.ID, databases.NewLogin{Username: b.Username, Database: b.Database,
			Access: b.Access, KeyPattern: b.KeyPattern})
		if err != nil {
			return nil, err
		}
		return &loginSecretOutput{Location: "/api/v1/databases/" + in.ID + "/jobs/" + out.JobID, Body: out}, nil
	}))
	op(s, huma.Operation{
		OperationID: "attach-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/attach", Tags: tags,
		Summary: "Attach an application to an instance",
		Description: "Creates a dedicated readwrite login app_<application id> by a db.user.create job (202): on a SQL instance " +
			"for the database (the instance's initial one by default); on Redis/Valkey an ACL user whose keys are " +
			"<application name>:* with the read-write command set (no dangerous commands). When the job succeeds, env_key in the application's env is set to the login's " +
			"URL as the application's container reaches the instance (managed: the container name on the capstan network and the " +
			"engine's port; external: the registered host and port), applied on the application's next deployment; nothing is " +
			"redeployed. A successful rotation of the login sets it again. Deleting the application drops the login; deleting " +
			"the instance forgets the attachment and leaves the env value. 404 for an unknown application or instance; 409 if " +
			"the env key is set already or the application is attached to this instance; 422 for bad input (database on a " +
			"key-value instance), or an application on another server than a managed instance.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *attachInput) (*attachOutput, error) {
		c := caller(ctx)
		b := in.Body
		out, err := s.deps.Databases.Attach(ctx, c, in.ID, databases.AttachRequest{ApplicationID: b.ApplicationID, EnvKey: b.EnvKey,
			Database: b.Database})
		if err != nil {
			return nil, err
		}
		return &attachOutput{Location: "/api/v1/databases/" + in.ID + "/jobs/" + out.JobID, Body: out}, nil
	}))
	op(s, huma.Operation{
		OperationID: "rotate-database-login", Method: http.MethodPost, Path: "/api/v1/databases/{id}/users/{credential_id}/rotate",
		Tags: tags, Summary: "Give a login a new random password",
		Description: "Queues db.user.rotate (202) with a new random password, returned here once. The stored password is replaced " +
			"only when the job succeeds: if it fails, the old password stays stored and (on the engine) in force. One rotation or " +
			"drop at a time per login (409 login-busy); the instance's admin login is not rotated here (409).",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *rotateLoginInput) (*loginSecretOutput, error) {
		out, err := s.deps.Databases.RotateLogin(ctx, caller(ctx), in.ID, in.CredentialID)
		if err != nil {
			return nil, err
		}
		return &loginSecretOutput{Location: "/api/v1/databases/" + in.ID + "/jobs/" + out.JobID, Body: out}, nil
	}))
	op(s, huma.Operation{
		OperationID: "drop-database-login", Method: http.MethodDelete, Path: "/api/v1/databases/{id}/users/{username}", Tags: tags,
		Summary: "Drop a login",
		Description: "Queues db.user.drop (202): on PostgreSQL what the login owns in its database is reassigned to the admin login " +
			"and its privileges dropped first. A stored login is forgotten when the job succeeds (dropping until then). The " +
			"instance's admin login cannot be dropped (409).",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *dropLoginInput) (*acceptedOutput, error) {
		j, err := s.deps.Databases.DropLogin(ctx, caller(ctx), in.ID, in.Username)
		if err != nil {
			return nil, err
		}
		return databaseAccepted(in.ID, j.ID, accepted(j, true)), nil
	}))
}

package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/databases"
)

type createManagedInput struct {
	Body struct {
		Name        string `json:"name" maxLength:"63" doc:"DNS label: 1 to 63 lowercase letters, digits and '-', not at either end; unique. The container is capstan-db-{name}"`
		ServerID    string `json:"server_id" maxLength:"64" doc:"The enrolled server that runs the instance"`
		Engine      string `json:"engine" maxLength:"32" doc:"postgres, mysql, mariadb, redis or valkey"`
		Version     string `json:"version,omitempty" maxLength:"16" doc:"One of the engine's versions (GET /api/v1/databases/engines); the default version when absent"`
		Database    string `json:"database,omitempty" maxLength:"63" doc:"SQL engines: the initial database (required; lowercase letters, digits and '_'). Key-value engines: leave out"`
		MemoryLimit *int64 `json:"memory_limit,omitempty" doc:"The container's memory limit in bytes, 67108864 to 1099511627776 (64 MiB to 1 TiB); none when absent"`
	}
}

type databaseControlInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Action string `json:"action" maxLength:"16" doc:"start, stop or restart"`
	}
}

type databaseDeleteInput struct {
	ID    string `path:"id" maxLength:"64"`
	Purge bool   `query:"purge" doc:"Managed instances: remove the data volume too. Without it the volume is kept"`
}

type databaseRemovalOutput struct {
	Status int `json:"-"`
	Body   databases.DatabaseRemoval
}

func (s *Server) registerManagedDatabases() {
	tags := []string{"Databases"}
	op(s, huma.Operation{
		OperationID: "create-database", Method: http.MethodPost, Path: "/api/v1/databases", Tags: tags,
		Summary: "Create a managed database instance",
		Description: "Stores the instance in state creating and queues db.create on server_id (202). The agent creates the " +
			"server's capstan network if missing, a named volume and a container of the version's image (restart policy " +
			"unless-stopped, the memory limit, the engine's port published on 127.0.0.1 only), and waits until the engine " +
			"accepts the admin login on the initial database: the instance is then ready (host 127.0.0.1, the published " +
			"port), or failed with the error. The admin password is generated here, stored encrypted and sent to the agent " +
			"only in the job's secrets; read it with GET …/connection. 422 for an unknown engine or version or a name in use.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *createManagedInput) (*registrationOutput, error) {
		c := caller(ctx)
		b := in.Body
		reg, err := s.deps.Databases.CreateManaged(ctx, c, databases.NewManaged{Name: b.Name, ServerID: b.ServerID, Engine: b.Engine,
			Version: b.Version, Database: b.Database, MemoryLimit: b.MemoryLimit})
		if err != nil {
			return nil, err
		}
		return &registrationOutput{Location: "/api/v1/databases/" + reg.Instance.ID, Body: reg}, nil
	}))
	op(s, huma.Operation{
		OperationID: "control-database", Method: http.MethodPost, Path: "/api/v1/databases/{id}/control", Tags: tags,
		Summary: "Start, stop or restart a managed instance",
		Description: "Queues db.control (202); the instance is starting, stopping or restarting until the job ends, then ready " +
			"(after start and restart the job waits until the engine accepts the admin login), stopped, or failed. The data " +
			"stays in the instance's volume. 409 for an external instance or one whose job is still running.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasDatabases, func(ctx context.Context, in *databaseControlInput) (*registrationOutput, error) {
		reg, err := s.deps.Databases.Control(ctx, caller(ctx), in.ID, in.Body.Action)
		if err != nil {
			return nil, err
		}
		return &registrationOutput{Location: "/api/v1/databases/" + reg.Instance.ID, Body: reg}, nil
	}))
}

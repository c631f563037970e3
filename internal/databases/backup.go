package databases

import (
	"context"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

// Source is what a job needs to dump or load one database of an
// instance: where it is, how its tools run, and its admin login's
// password (for the job's secrets only).
type Source struct {
	Instance Instance
	Target   agentproto.DBTarget
	// Tools are where the dump of a backup runs; Load where a load of
	// it runs (a verification, a restore), in the image of a newer
	// version when the instance's has none (loadSource).
	Tools    agentproto.DBArtifactSource
	Load     agentproto.DBArtifactSource
	Database string
	Password string
}

// BackupSource returns the source of a backup of database ("": the
// initial one) of a ready instance. database must be a name
// artifactDatabaseProblem takes.
func (s *Service) BackupSource(ctx context.Context, id, database string) (Source, error) {
	inst, err := s.store.DatabaseInstance(ctx, id)
	if err != nil {
		return Source{}, err
	}
	if database != "" {
		if p := artifactDatabaseProblem(inst.Engine, database); p != "" {
			return Source{}, fault.Invalidf("database", "%s", p)
		}
	}
	inst, cred, password, err := s.ready(ctx, id, nil, agentproto.EngineKind(inst.Engine), "backup")
	if err != nil {
		return Source{}, err
	}
	if database == "" {
		database = inst.Database
	}
	return Source{Instance: inst, Target: target(inst, cred), Tools: s.source(inst), Load: s.loadSource(inst), Database: database,
		Password: password}, nil
}

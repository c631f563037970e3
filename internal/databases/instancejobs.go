package databases

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// JobResult is a database job as its instance's job path shows it.
type JobResult struct {
	JobID  string      `json:"job_id"`
	Type   string      `json:"type" enum:"db.connect,db.query,db.explore,db.kv,db.database.create,db.database.drop,db.user.create,db.user.rotate,db.user.drop,db.create,db.control,db.remove,db.export,db.import"`
	Status jobs.Status `json:"status" enum:"queued,running,succeeded,failed,cancelled"`
	// Error and Data follow the job view rule (jobs.Job.For).
	Error      *string         `json:"error" doc:"Why it failed (the engine's message for an engine error); null otherwise. Members get the error class"`
	ErrorClass *string         `json:"error_class" doc:"agent_lost, timed_out, server_revoked, server_offline, queue_timed_out, cancelled or failed; null when there is no error"`
	Data       json.RawMessage `json:"data" doc:"The result once finished: DBQueryResult, DBExploreResult, DBKVResult, DBConnectResult, DBExportResult or DBImportResult; for a failed job {error: {code, message, position}}. Null until finished, and for members"`
	Redacted   bool            `json:"redacted" doc:"True when error text and data were withheld (the caller is not an administrator)"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

// instanceOf returns the instance a database job is for; "" for any other
// job.
func instanceOf(j jobs.Job) string {
	switch j.Type {
	case agentproto.JobDBConnect, agentproto.JobDBQuery, agentproto.JobDBExplore, agentproto.JobDBKV, agentproto.JobDBControl:
	case agentproto.JobDBDatabaseCreate, agentproto.JobDBDatabaseDrop, agentproto.JobDBUserCreate, agentproto.JobDBUserRotate,
		agentproto.JobDBUserDrop, agentproto.JobDBExport, agentproto.JobDBImport:
	case agentproto.JobDBCreate, agentproto.JobDBRemove:
		var p struct {
			InstanceID string `json:"instance_id"`
		}
		if json.Unmarshal(j.Payload, &p) != nil {
			return ""
		}
		return p.InstanceID
	default:
		return ""
	}
	var p struct {
		Target struct {
			InstanceID string `json:"instance_id"`
		} `json:"target"`
	}
	if json.Unmarshal(j.Payload, &p) != nil {
		return ""
	}
	return p.Target.InstanceID
}

// Job returns a job of the instance as r may read it, once it finished or
// after wait, whichever comes first. A job of another instance (or not a
// database job) is not found.
func (s *Service) Job(ctx context.Context, id, jobID string, wait time.Duration, r jobs.Reader) (JobResult, error) {
	if _, err := s.store.DatabaseInstance(ctx, id); err != nil {
		return JobResult{}, err
	}
	j, _, err := s.jobs.Read(ctx, jobID, jobs.AdminReader)
	if fault.Is(err, fault.NotFound) || err == nil && instanceOf(j) != id {
		return JobResult{}, fault.NotFoundf("No such job of this database instance.")
	}
	if err != nil {
		return JobResult{}, err
	}
	if wait > 0 && !j.Status.Finished() {
		if j, _, err = s.jobs.Wait(ctx, jobID, wait, jobs.AdminReader); err != nil {
			return JobResult{}, err
		}
	}
	j = j.For(r)
	return JobResult{JobID: j.ID, Type: j.Type, Status: j.Status, Error: j.Error, ErrorClass: j.ErrorClass, Data: j.Data,
		Redacted: j.Redacted, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}, nil
}

package agentproto

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// JobType declares one job type: its name on the wire, the payload the
// agent receives (P) and the data it reports when the job ends (R). The
// control plane queues a job of a declared type with a payload of P, the
// agent's handler for it receives a P and returns an R, and the
// compiler checks both ends against this one declaration.
type JobType[P, R any] struct {
	Name string
}

// JobName is the type's name on the wire.
func (t JobType[P, R]) JobName() string { return t.Name }

// DecodePayload reads a job's payload. A missing payload is an error: every
// declared type has one.
func (t JobType[P, R]) DecodePayload(raw json.RawMessage) (P, error) {
	var p P
	if len(raw) == 0 || string(raw) == "null" {
		return p, fmt.Errorf("invalid %s payload: missing", t.Name)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("invalid %s payload: %w", t.Name, err)
	}
	return p, nil
}

// DecodeResult reads a finished job's data.
func (t JobType[P, R]) DecodeResult(raw json.RawMessage) (R, error) {
	var r R
	if len(raw) == 0 || string(raw) == "null" {
		return r, fmt.Errorf("%s: the job reported no data", t.Name)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%s: reading the job's data: %w", t.Name, err)
	}
	return r, nil
}

// Shape is the Go types of the payload and the data, for documentation
// and tests that read every declared type.
func (t JobType[P, R]) Shape() (payload, result reflect.Type) {
	return reflect.TypeFor[P](), reflect.TypeFor[R]()
}

// Declared is any declared job type, whatever its payload and result.
type Declared interface {
	JobName() string
	Shape() (payload, result reflect.Type)
}

// The declared job types.
var (
	AgentPing = JobType[PingPayload, PingResult]{JobAgentPing}

	ServiceStart   = JobType[ServicePayload, UnitState]{JobServiceStart}
	ServiceStop    = JobType[ServicePayload, UnitState]{JobServiceStop}
	ServiceRestart = JobType[ServicePayload, UnitState]{JobServiceRestart}
	ServiceLogs    = JobType[ServiceLogsPayload, LogsResult]{JobServiceLogs}

	ContainerStart   = JobType[ContainerPayload, ContainerState]{JobContainerStart}
	ContainerStop    = JobType[ContainerPayload, ContainerState]{JobContainerStop}
	ContainerRestart = JobType[ContainerPayload, ContainerState]{JobContainerRestart}
	ContainerLogs    = JobType[ContainerLogsPayload, LogsResult]{JobContainerLogs}
	ContainerInspect = JobType[ContainerPayload, ContainerInspectResult]{JobContainerInspect}
	DockerPrune      = JobType[DockerPrunePayload, DockerPruneResult]{JobDockerPrune}

	LogsRead = JobType[LogsReadPayload, LogsResult]{JobLogsRead}

	AppDeploy   = JobType[DeployPayload, DeployResult]{JobAppDeploy}
	AppRemove   = JobType[RemovePayload, RemoveResult]{JobAppRemove}
	AppLogs     = JobType[AppLogsPayload, AppLogsResult]{JobAppLogs}
	ProxyApply  = JobType[ProxyApplyPayload, ProxyApplyResult]{JobProxyApply}
	DomainCheck = JobType[DomainCheckPayload, DomainCheckResult]{JobDomainCheck}

	DBConnect = JobType[DBConnectPayload, DBConnectResult]{JobDBConnect}
	DBQuery   = JobType[DBQueryPayload, DBQueryResult]{JobDBQuery}
	DBExplore = JobType[DBExplorePayload, DBExploreResult]{JobDBExplore}
	DBKV      = JobType[DBKVPayload, DBKVResult]{JobDBKV}

	DBDatabaseCreate = JobType[DBDatabasePayload, DBAdminResult]{JobDBDatabaseCreate}
	DBDatabaseDrop   = JobType[DBDatabasePayload, DBAdminResult]{JobDBDatabaseDrop}
	DBUserCreate     = JobType[DBUserPayload, DBAdminResult]{JobDBUserCreate}
	DBUserRotate     = JobType[DBUserPayload, DBAdminResult]{JobDBUserRotate}
	DBUserDrop       = JobType[DBUserPayload, DBAdminResult]{JobDBUserDrop}

	DBCreate  = JobType[DBCreatePayload, DBCreateResult]{JobDBCreate}
	DBControl = JobType[DBControlPayload, DBControlResult]{JobDBControl}
	DBRemove  = JobType[DBRemovePayload, DBRemoveResult]{JobDBRemove}

	DBExport = JobType[DBExportPayload, DBExportResult]{JobDBExport}
	DBImport = JobType[DBImportPayload, DBImportResult]{JobDBImport}

	BackupStorageTest = JobType[BackupStorageTestPayload, BackupStorageTestResult]{JobBackupStorageTest}
	BackupRun         = JobType[BackupRunPayload, BackupRunResult]{JobBackupRun}
	BackupVerify      = JobType[BackupRestorePayload, BackupVerifyResult]{JobBackupVerify}
	BackupRestore     = JobType[BackupRestorePayload, BackupVerifyResult]{JobBackupRestore}
	BackupDelete      = JobType[BackupDeletePayload, BackupDeleteResult]{JobBackupDelete}
)

// JobTypes lists every declared job type.
var JobTypes = []Declared{
	AgentPing, ServiceStart, ServiceStop, ServiceRestart, ServiceLogs,
	ContainerStart, ContainerStop, ContainerRestart, ContainerLogs, ContainerInspect, DockerPrune,
	LogsRead, AppDeploy, AppRemove, AppLogs, ProxyApply, DomainCheck,
	DBConnect, DBQuery, DBExplore, DBKV,
	DBDatabaseCreate, DBDatabaseDrop, DBUserCreate, DBUserRotate, DBUserDrop,
	DBCreate, DBControl, DBRemove, DBExport, DBImport,
	BackupStorageTest, BackupRun, BackupVerify, BackupRestore, BackupDelete,
}

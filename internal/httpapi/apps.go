package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/domains"
)

var (
	errNoApps    = errors.New("httpapi: Deps.Apps is not set")
	errNoDomains = errors.New("httpapi: Deps.Domains is not set")
)

// maxAppBody bounds application bodies: up to 200 environment values of
// up to 32 KiB each.
const maxAppBody = 8 << 20

type appListInput struct {
	ServerID string `query:"server_id" maxLength:"64" doc:"Only this server's applications"`
}

type appListOutput struct {
	Body struct {
		Applications []apps.Application `json:"applications" doc:"Oldest first; no environment values, compose documents masked, service commands hidden"`
	}
}

type appGetInput struct {
	ID     string `path:"id" maxLength:"64"`
	Reveal bool   `query:"reveal" default:"true" doc:"Administrators: true (the default) returns the environment values, the compose document unmasked and a service's build and start commands, and records an application.env.read audit entry; false returns the keys with value_set and no values, the document masked and the commands hidden, and records nothing. Members never get them, whatever it says"`
}

type appDetailOutput struct {
	Location string `header:"Location" doc:"The application's URL (on create)"`
	Body     apps.ApplicationDetail
}

type createAppInput struct {
	Body struct {
		Name                string             `json:"name" doc:"DNS label (1 to 63 lowercase letters, digits and '-', not at either end), unique on the server"`
		ServerID            string             `json:"server_id" maxLength:"64" doc:"An enrolled server"`
		Kind                string             `json:"kind,omitempty" enum:"container,compose,service" doc:"container (the default when absent), compose or service; fixed at creation"`
		Source              apps.Source        `json:"source" doc:"{type: image, image}, {type: git, installation_id, repo_id, branch} (the installation must be recorded and able to read the repository, and the branch must exist; 422 otherwise) or, for compose applications, {type: inline} with the document in compose"`
		ContainerPort       int                `json:"container_port,omitempty" doc:"The port the container listens on: 1 to 65535; required except for service applications (the agent gives each release slot its PORT)"`
		HealthPath          *string            `json:"health_path,omitempty" doc:"Starts with '/', at most 1024 characters; default / when absent or null (an empty string is refused)"`
		Env                 []apps.EnvVar      `json:"env,omitempty" doc:"At most 200; keys [A-Za-z_][A-Za-z0-9_]*, unique; values at most 32 KiB, stored encrypted"`
		AutoDeploy          bool               `json:"auto_deploy,omitempty"`
		MemoryLimit         string             `json:"memory_limit,omitempty" doc:"e.g. 512m or 1g (units b, k, m, g), at least 6m; empty for none"`
		Deploy              *bool              `json:"deploy,omitempty" doc:"Deploy at once (default true)"`
		Dockerfile          *string            `json:"dockerfile,omitempty" doc:"Git sources: the Dockerfile's path inside the build context (default Dockerfile)"`
		BuildContext        *string            `json:"build_context,omitempty" doc:"Git sources: the build context's directory in the repository (default .)"`
		BuildArgs           []apps.EnvVar      `json:"build_args,omitempty" doc:"Git sources: build arguments, like env (at most 200, stored encrypted, sent to the agent in the job's secrets, never shown by the API). NOT secret on the server: Docker records every build argument a RUN step uses, in clear, in the image's history (docker history --no-trunc); never pass tokens or passwords here: use build_secrets"`
		BuildSecrets        []apps.BuildSecret `json:"build_secrets,omitempty" maxItems:"50" doc:"Container applications from git: secrets the build reads and the image does not keep. A Dockerfile step mounts one with RUN --mount=type=secret,id=KEY (at /run/secrets/KEY by default); the build runs with the engine's BuildKit builder, and the value is in no layer and not in the image's history. Values are stored encrypted, sent to the agent in the deploy job's secrets only, and never shown again, to anyone: the detail lists build_secret_keys. At most 50, values 1 byte to 32 KiB. The server's agent must build with build secrets (409 agent-upgrade-required otherwise)"`
		ComposeFile         string             `json:"compose_file,omitempty" maxLength:"255" doc:"Compose applications from git: the compose file's path in the repository (default compose.yaml, else docker-compose.yml); services may then have build (context and dockerfile inside the repository)"`
		Compose             string             `json:"compose,omitempty" maxLength:"262144" doc:"Compose applications (source type inline): the compose document. Services with image, environment, env_file (stands for the application's env), command, depends_on (service_started, service_healthy), healthcheck, named volumes, networks, restart, mem_limit, expose; any other key is refused (422 naming it)"`
		WebService          string             `json:"web_service,omitempty" maxLength:"63" doc:"Compose applications: the service the proxy routes to, on container_port, checked on health_path"`
		BuildCommand        string             `json:"build_command,omitempty" maxLength:"4096" doc:"Service applications: runs with /bin/sh -c in the checkout as the server's unprivileged build account (one line; empty for nothing to build)"`
		StartCommand        string             `json:"start_command,omitempty" maxLength:"4096" doc:"Service applications (required): runs with /bin/sh -c in the release directory under a sandboxed systemd unit; the program listens on 127.0.0.1:$PORT"`
		BuildTimeoutSeconds int                `json:"build_timeout_seconds,omitempty" doc:"Service applications: the build command's time limit in seconds, 1 to 7200 (default 900)"`
		Publish             *apps.Publish      `json:"publish,omitempty" doc:"A port of the server on which its proxy serves the application over plain HTTP, whatever the Host: {host_port, bind} (bind default 127.0.0.1). Every release and rollback is switched to on it as on the application's domains, without downtime. 409 port-published when another application on the server publishes host_port"`
	}
}

type patchAppInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Name                *string             `json:"name,omitempty"`
		Kind                *string             `json:"kind,omitempty" enum:"container,compose,service" doc:"Fixed at creation: the application's own kind is accepted, any other is refused (422)"`
		Image               *string             `json:"image,omitempty" doc:"A new image reference (source type image)"`
		Source              *apps.Source        `json:"source,omitempty" doc:"Instead of image"`
		ContainerPort       *int                `json:"container_port,omitempty" doc:"The port the container listens on: 1 to 65535; unchanged when absent or null"`
		HealthPath          *string             `json:"health_path,omitempty" doc:"Starts with '/', at most 1024 characters; unchanged when absent or null"`
		Env                 *[]apps.EnvVar      `json:"env,omitempty" doc:"Replaces the whole list (at most 200); unchanged when absent or null"`
		AutoDeploy          *bool               `json:"auto_deploy,omitempty"`
		MemoryLimit         *string             `json:"memory_limit,omitempty" doc:"Empty for none"`
		Dockerfile          *string             `json:"dockerfile,omitempty" doc:"Git sources; unchanged when absent or null"`
		BuildContext        *string             `json:"build_context,omitempty" doc:"Git sources; unchanged when absent or null"`
		BuildArgs           *[]apps.EnvVar      `json:"build_args,omitempty" doc:"Git sources: replaces the whole list; unchanged when absent or null. Not secret on the server: they are in the built image's history (docker history) in clear"`
		BuildSecrets        *[]apps.BuildSecret `json:"build_secrets,omitempty" maxItems:"50" doc:"Container applications from git: replaces the whole list, every value given again (values are write-only); [] removes them; unchanged when absent or null"`
		Compose             *string             `json:"compose,omitempty" maxLength:"262144" doc:"Compose applications: a new compose document, checked as on create; unchanged when absent or null"`
		ComposeFile         *string             `json:"compose_file,omitempty" maxLength:"255" doc:"Compose applications from git: the compose file's path in the repository (empty for the default); unchanged when absent or null"`
		WebService          *string             `json:"web_service,omitempty" maxLength:"63" doc:"Compose applications; unchanged when absent or null"`
		BuildCommand        *string             `json:"build_command,omitempty" maxLength:"4096" doc:"Service applications; unchanged when absent or null"`
		StartCommand        *string             `json:"start_command,omitempty" maxLength:"4096" doc:"Service applications; unchanged when absent or null"`
		BuildTimeoutSeconds *int                `json:"build_timeout_seconds,omitempty" doc:"Service applications: 1 to 7200; unchanged when absent or null"`
		Publish             *apps.Publish       `json:"publish,omitempty" doc:"The published port, as on create; {\"host_port\": 0} (or {}) removes it; unchanged when absent or null. Applied to the live release at once (a proxy.apply job), not at the next deployment. 409 port-published when another application on the server publishes host_port"`
	}
}

type envChangeInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Set    []apps.EnvVar `json:"set,omitempty" maxItems:"200" doc:"Variables to add (at the end) or whose value to replace (where they are): keys [A-Za-z_][A-Za-z0-9_]*, unique; values at most 32 KiB, stored encrypted"`
		Remove []string      `json:"remove,omitempty" maxItems:"200" doc:"Keys to take out; each must be in the env and not also in set"`
	}
}

type appDeleteInput struct {
	ID    string `path:"id" maxLength:"64"`
	Purge bool   `query:"purge" doc:"Compose applications: remove their named volumes too (default false: the volumes and their data stay on the server)"`
	Force bool   `query:"force" doc:"Succeed even when the server's proxy cannot take its new state, forgetting the application's sites there (they may be served until the proxy takes the server's next state)"`
}

type removalOutput struct {
	Status int `json:"-"`
	Body   apps.Removal
}

type deployInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body *struct {
		Ref string `json:"ref,omitempty" minLength:"1" doc:"Image sources: an image reference for this deployment only, instead of the application's. Git sources: a branch, tag or commit, resolved to its commit now (default: the application's branch). An empty string is refused"`
	}
}

type deploymentAcceptedOutput struct {
	Location string `header:"Location" doc:"The deployment's URL"`
	Body     struct {
		DeploymentID string                `json:"deployment_id"`
		JobID        string                `json:"job_id" doc:"Its app.deploy job; empty while it waits for the application's previous deployment"`
		Status       string                `json:"status" enum:"queued,running,succeeded,failed,cancelled,superseded"`
		Deployment   apps.DeploymentDetail `json:"deployment"`
	}
}

func deploymentAccepted(d apps.DeploymentDetail) *deploymentAcceptedOutput {
	out := &deploymentAcceptedOutput{Location: "/api/v1/deployments/" + d.ID}
	out.Body.DeploymentID, out.Body.Status, out.Body.Deployment = d.ID, d.Status, d
	if d.JobID != nil {
		out.Body.JobID = *d.JobID
	}
	return out
}

type deploymentListInput struct {
	Limit int `query:"limit" minimum:"1" maximum:"100" default:"30" doc:"How many deployments: 1 to 100; default 30 when absent"`
}

type appDeploymentListInput struct {
	ID    string `path:"id" maxLength:"64"`
	Limit int    `query:"limit" minimum:"1" maximum:"100" default:"30" doc:"How many deployments: 1 to 100; default 30 when absent"`
}

type deploymentListOutput struct {
	Body struct {
		Deployments []apps.Deployment `json:"deployments" doc:"Newest first"`
	}
}

type deploymentIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type appLogsInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body *struct {
		Lines   *int   `json:"lines,omitempty" minimum:"1" maximum:"1000" doc:"How many lines: 1 to 1000; default 200 when absent or null (0 is refused)"`
		Since   string `json:"since,omitempty" doc:"RFC 3339: only lines at or after it"`
		Service string `json:"service,omitempty" maxLength:"63" doc:"Compose applications: the service whose container to read (default: the web service)"`
	}
}

type appLogsResultInput struct {
	ID    string `path:"id" maxLength:"64"`
	JobID string `path:"job_id" maxLength:"64"`
}

type trafficInput struct {
	ID    string `path:"id" maxLength:"64"`
	Range string `query:"range" default:"1h" enum:"1h,24h,7d" doc:"1h: per minute; 24h: 5-minute buckets; 7d: hourly. Default 1h when absent"`
}

func (s *Server) registerApps() {
	tags := []string{"Applications"}
	op(s, huma.Operation{
		OperationID: "list-applications", Method: http.MethodGet, Path: "/api/v1/applications", Tags: tags,
		Summary: "Applications with their status (no environment values)",
		Description: "Lists carry no secrets: environment keys without values, every compose document masked (every value of " +
			"an environment, build argument, label, command and x- extension is ********, compose_masked true) and service " +
			"applications' commands hidden (commands_hidden true), for administrators as for members.",
	}, SignedIn, needs(s.hasApps, func(ctx context.Context, in *appListInput) (*appListOutput, error) {
		list, err := s.deps.Apps.List(ctx, in.ServerID, reader(ctx))
		if err == nil {
			list, err = narrowList(ctx, s, list, func(a apps.Application) target { return target{app: a.ID, server: a.ServerID} })
		}
		if err != nil {
			return nil, err
		}
		out := &appListOutput{}
		out.Body.Applications = list
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "create-application", Method: http.MethodPost, Path: "/api/v1/applications", Tags: tags,
		Summary: "Create an application (and deploy it)",
		Description: "Validates every field (422 names each bad one, e.g. env[2].key), stores the environment encrypted and, " +
			"unless deploy is false, queues the first deployment: `latest` in the reply is that deployment. 409 when the name is " +
			"taken on the server, or (port-published) the published port is another application's there; of two creates racing " +
			"for one port, one succeeds. The reply's addresses list where the application answers (domains, published port). The reply lists the environment's keys with value_set, not the values, and the build secrets' keys.",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict}, MaxBodyBytes: maxAppBody,
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *createAppInput) (*appDetailOutput, error) {
		c := caller(ctx)
		b := in.Body
		d, err := s.deps.Apps.Create(ctx, c, apps.NewApp{Name: b.Name, ServerID: b.ServerID, Kind: b.Kind, Source: b.Source,
			ContainerPort: b.ContainerPort, HealthPath: b.HealthPath, Env: b.Env, AutoDeploy: b.AutoDeploy,
			MemoryLimit: b.MemoryLimit, Deploy: b.Deploy == nil || *b.Deploy,
			Dockerfile: b.Dockerfile, BuildContext: b.BuildContext, BuildArgs: b.BuildArgs, BuildSecrets: b.BuildSecrets,
			Compose: b.Compose, WebService: b.WebService, ComposeFile: b.ComposeFile, Service: serviceSettings(b.Kind, b.BuildCommand, b.StartCommand, b.BuildTimeoutSeconds),
			Publish: b.Publish})
		if err != nil {
			return nil, err
		}
		return &appDetailOutput{Location: "/api/v1/applications/" + d.ID, Body: d}, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-application", Method: http.MethodGet, Path: "/api/v1/applications/{id}", Tags: tags,
		Summary: "Application detail with its current and latest deployments",
		Description: "Environment values are secrets, and so are the values written inline in a compose document (environment, " +
			"build arguments, labels, commands, x- extensions) and a service application's build and start commands. An " +
			"administrator gets them by default (reveal=true), and each such read is audited as application.env.read; with " +
			"reveal=false the keys come with value_set and no value, the document masked (compose_masked) and the commands " +
			"hidden (commands_hidden), unaudited, and so do the current and latest deployments' specs. Members get the keys " +
			"and the masked forms only, never the values, and the class of a removal or deployment error instead of its text. " +
			"Build secrets are never returned, to anyone, revealed or not: the detail lists their keys (build_secret_keys).",
		Errors: []int{http.StatusNotFound},
	}, SignedIn, needs(s.hasApps, func(ctx context.Context, in *appGetInput) (*appDetailOutput, error) {
		d, err := s.deps.Apps.Get(ctx, in.ID, apps.Reading{Reader: reader(ctx), Reveal: in.Reveal, By: caller(ctx)})
		if err != nil {
			return nil, err
		}
		return &appDetailOutput{Body: d}, nil
	}))
	op(s, huma.Operation{
		OperationID: "update-application", Method: http.MethodPatch, Path: "/api/v1/applications/{id}", Tags: tags,
		Summary: "Change an application's settings for its next deployment",
		Description: "Any subset of the fields, validated as on create; env replaces the whole list. The running container is " +
			"untouched until the next deployment; a change of publish is applied to the live release at once (a proxy.apply job " +
			"on the server). 409 port-published when the port is another application's on the server. The reply lists the environment's keys with value_set, not the values, and the " +
			"build secrets' keys.",
		Errors: []int{http.StatusNotFound, http.StatusConflict}, MaxBodyBytes: maxAppBody,
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *patchAppInput) (*appDetailOutput, error) {
		c := caller(ctx)
		b := in.Body
		d, err := s.deps.Apps.Update(ctx, c, in.ID, apps.Patch{Name: b.Name, Kind: b.Kind, Image: b.Image, Source: b.Source,
			ContainerPort: b.ContainerPort, HealthPath: b.HealthPath, Env: b.Env, AutoDeploy: b.AutoDeploy, MemoryLimit: b.MemoryLimit,
			Dockerfile: b.Dockerfile, BuildContext: b.BuildContext, BuildArgs: b.BuildArgs, BuildSecrets: b.BuildSecrets,
			Compose: b.Compose, WebService: b.WebService, ComposeFile: b.ComposeFile, Service: apps.ServicePatch{BuildCommand: b.BuildCommand, StartCommand: b.StartCommand, BuildTimeoutSeconds: b.BuildTimeoutSeconds},
			Publish: b.Publish})
		if err != nil {
			return nil, err
		}
		return &appDetailOutput{Body: d}, nil
	}))
	op(s, huma.Operation{
		OperationID: "change-application-env", Method: http.MethodPatch, Path: "/api/v1/applications/{id}/env", Tags: tags,
		Summary: "Set or remove some environment variables, keeping the others' values",
		Description: "Sets the variables in set (a new key is added at the end, an existing one keeps its place and gets the new " +
			"value) and removes those in remove; the other variables keep their values, which the caller never reads: an editor " +
			"of write-only values changes the env through this. Applies to the next deployment; nothing is redeployed. A key to " +
			"remove that is not in the env, or named twice, is a 422 and nothing changes. Concurrent changes are all kept. The " +
			"reply lists the environment's keys with value_set, not the values.",
		Errors: []int{http.StatusNotFound, http.StatusConflict}, MaxBodyBytes: maxAppBody,
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *envChangeInput) (*appDetailOutput, error) {
		d, err := s.deps.Apps.ChangeEnv(ctx, caller(ctx), in.ID, apps.EnvChange{Set: in.Body.Set, Remove: in.Body.Remove})
		if err != nil {
			return nil, err
		}
		return &appDetailOutput{Body: d}, nil
	}))
	op(s, huma.Operation{
		OperationID: "delete-application", Method: http.MethodDelete, Path: "/api/v1/applications/{id}", Tags: tags,
		Summary: "Remove an application from its server",
		Description: "Cancels its queued deployments and queues app.remove (202, status removing): the agent removes its containers " +
			"and applies the proxy state without its domains; when that succeeds the application, its deployments and domains are " +
			"deleted. If the removal fails the application stays, with status removal_failed and remove_error. 409 while one of its " +
			"deployments runs. On a revoked or deleted server the application is deleted at once (200, status deleted). A compose " +
			"application's named volumes are kept unless purge is true. When the server's proxy cannot be reached (Caddy down), " +
			"an application without a domain is removed all the same; one with domains fails, its remove_error naming the sites " +
			"left in the proxy, until it is deleted again with force=true.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *appDeleteInput) (*removalOutput, error) {
		r, err := s.deps.Apps.DeleteWith(ctx, caller(ctx), in.ID, apps.RemoveOptions{Purge: in.Purge, Force: in.Force})
		if err != nil {
			return nil, err
		}
		status := http.StatusAccepted
		if r.Job == nil {
			status = http.StatusOK
		}
		return &removalOutput{Status: status, Body: r}, nil
	}))
	op(s, huma.Operation{
		OperationID: "deploy-application", Method: http.MethodPost, Path: "/api/v1/applications/{id}/deployments", Tags: tags,
		Summary: "Deploy an application",
		Description: "Queues a deployment of the application's current settings (ref overrides the image reference for this " +
			"deployment only). One deployment runs at a time per application: its app.deploy job is enqueued when the previous " +
			"deployment ends (job_id is empty until then); when several are queued, the newest runs and the older ones are " +
			"superseded. 202 with Location: the deployment.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *deployInput) (*deploymentAcceptedOutput, error) {
		c := caller(ctx)
		ref := ""
		if in.Body != nil {
			ref = in.Body.Ref
		}
		d, err := s.deps.Apps.Deploy(ctx, c, in.ID, ref)
		if err != nil {
			return nil, err
		}
		return deploymentAccepted(d), nil
	}))
	op(s, huma.Operation{
		OperationID: "list-application-deployments", Method: http.MethodGet, Path: "/api/v1/applications/{id}/deployments", Tags: tags,
		Summary: "An application's deployments, newest first", Errors: []int{http.StatusNotFound},
		Description: "Each spec's compose document is masked and a service's commands are hidden, for administrators as for " +
			"members; an administrator reads them in the deployment's detail.",
	}, SignedIn, needs(s.hasApps, func(ctx context.Context, in *appDeploymentListInput) (*deploymentListOutput, error) {
		list, err := s.deps.Apps.ListDeployments(ctx, in.ID, in.Limit, reader(ctx))
		if err != nil {
			return nil, err
		}
		out := &deploymentListOutput{}
		out.Body.Deployments = list
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "read-application-logs", Method: http.MethodPost, Path: "/api/v1/applications/{id}/logs", Tags: tags,
		Summary:       "Read the live container's log",
		Description:   "Queues an app.logs job (202). Poll GET /api/v1/applications/{id}/logs/{job_id} for the lines and the container's state.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *appLogsInput) (*acceptedOutput, error) {
		var lines *int
		since, service := "", ""
		if in.Body != nil {
			lines, since, service = in.Body.Lines, in.Body.Since, in.Body.Service
		}
		j, err := s.deps.Apps.QueueServiceLogs(ctx, principal(ctx).User.ID, in.ID, service, lines, since)
		if err != nil {
			return nil, err
		}
		out := accepted(j, true)
		out.Location = "/api/v1/applications/" + in.ID + "/logs/" + j.ID
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-application-logs", Method: http.MethodGet, Path: "/api/v1/applications/{id}/logs/{job_id}", Tags: tags,
		Summary: "Lines and container state of an application log read", Errors: []int{http.StatusNotFound},
		Description: "Log lines can carry secrets: administrators get the lines and the container's state; members get the " +
			"read's status and error class only, with no lines and redacted true.",
	}, SignedIn, needs(s.hasApps, func(ctx context.Context, in *appLogsResultInput) (*bodyOutput[apps.AppLogs], error) {
		return reply(s.deps.Apps.Logs(ctx, in.ID, in.JobID, reader(ctx)))
	}))
	op(s, huma.Operation{
		OperationID: "get-application-requests", Method: http.MethodGet, Path: "/api/v1/applications/{id}/requests", Tags: tags,
		Summary: "Request traffic of an application's domains",
		Description: "From the proxy's access log, as the agent reports it per host and minute. 1h: one point per minute; 24h: " +
			"5-minute buckets; 7d: hourly. Every bucket is present (zeros without requests). p95_ms is the largest per-minute p95 " +
			"in the bucket, an upper bound of the bucket's true p95. Minutes are kept 8 days.",
		Errors: []int{http.StatusNotFound},
	}, SignedIn, needs(s.hasDomains, func(ctx context.Context, in *trafficInput) (*bodyOutput[domains.Traffic], error) {
		return reply(s.deps.Domains.Traffic(ctx, in.ID, in.Range))
	}))

	dtags := []string{"Deployments"}
	op(s, huma.Operation{
		OperationID: "list-deployments", Method: http.MethodGet, Path: "/api/v1/deployments", Tags: dtags,
		Summary: "Recent deployments of every application, newest first",
		Description: "Each spec's compose document is masked and a service's commands are hidden, for administrators as for " +
			"members; an administrator reads them in the deployment's detail.",
	}, SignedIn, needs(s.hasApps, func(ctx context.Context, in *deploymentListInput) (*deploymentListOutput, error) {
		list, err := s.deps.Apps.ListDeployments(ctx, "", in.Limit, reader(ctx))
		if err == nil {
			list, err = narrowList(ctx, s, list, func(d apps.Deployment) target { return target{app: d.ApplicationID, server: d.ServerID} })
		}
		if err != nil {
			return nil, err
		}
		out := &deploymentListOutput{}
		out.Body.Deployments = list
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "get-deployment", Method: http.MethodGet, Path: "/api/v1/deployments/{id}", Tags: dtags,
		Summary: "A deployment with its frozen spec, job, events and output", Errors: []int{http.StatusNotFound},
		Description: "The job's events (with the container's log tail when a release fails), data, output, the agent's result " +
			"and error text are shown to administrators only, and so are the spec's compose document unmasked and a service's " +
			"commands. Members get the deployment's spec with the document masked and the commands hidden, status, times and " +
			"error class, the job's metadata, and no events.",
	}, SignedIn, needs(s.hasApps, func(ctx context.Context, in *deploymentIDInput) (*bodyOutput[apps.DeploymentDetail], error) {
		return reply(s.deps.Apps.GetDeployment(ctx, in.ID, reader(ctx)))
	}))
	op(s, huma.Operation{
		OperationID: "cancel-deployment", Method: http.MethodPost, Path: "/api/v1/deployments/{id}/cancel", Tags: dtags,
		Summary: "Cancel a queued deployment",
		Description: "A deployment waiting for the application's previous one, or whose job the agent has not taken yet (the job " +
			"is cancelled too; POST /api/v1/jobs/{id}/cancel on that job does the same). 409 when it is not queued.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *deploymentIDInput) (*bodyOutput[apps.DeploymentDetail], error) {
		return reply(s.deps.Apps.CancelDeployment(ctx, caller(ctx), in.ID))
	}))
	op(s, huma.Operation{
		OperationID: "rollback-deployment", Method: http.MethodPost, Path: "/api/v1/deployments/{id}/rollback", Tags: dtags,
		Summary: "Roll back to a deployment",
		Description: "Queues a new deployment (rollback_of: this one) with this deployment's frozen spec and environment, pinned to " +
			"the exact image id it ran, through the same one-at-a-time queue (202). 409 when this deployment never succeeded. " +
			"If the image was pruned from the server since, the agent fails the new deployment with an error saying so.",
		DefaultStatus: http.StatusAccepted, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasApps, func(ctx context.Context, in *deploymentIDInput) (*deploymentAcceptedOutput, error) {
		d, err := s.deps.Apps.Rollback(ctx, caller(ctx), in.ID)
		if err != nil {
			return nil, err
		}
		return deploymentAccepted(d), nil
	}))
}

// serviceSettings are the service settings of a new application: nil
// when none is given (other kinds refuse any).
func serviceSettings(kind, build, start string, timeout int) *apps.ServiceSettings {
	if kind != apps.KindService && build == "" && start == "" && timeout == 0 {
		return nil
	}
	return &apps.ServiceSettings{BuildCommand: build, StartCommand: start, BuildTimeoutSeconds: timeout}
}

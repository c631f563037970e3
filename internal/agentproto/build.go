package agentproto

// Job secrets of a deploy from git.
const (
	// SecretGitToken is the job secret holding the credential the agent
	// fetches the repository with (a short-lived installation token, sent
	// as the password of HTTP basic authentication). Never written to
	// disk.
	SecretGitToken = "githost:token"
	// SecretBuildArgPrefix prefixes the job secrets holding build
	// argument values: SecretBuildArgPrefix + name.
	SecretBuildArgPrefix = "build_arg:"
	// SecretBuildSecretPrefix prefixes the job secrets holding build
	// secret values: SecretBuildSecretPrefix + id.
	SecretBuildSecretPrefix = "build_secret:"
)

// CapabilityBuildSecrets, in Facts.Capabilities, says the agent builds
// with BuildSpec.BuildSecretKeys: through BuildKit, each value handed to
// the build as a secret (RUN --mount=type=secret,id=ID) and kept out of
// the image. A control plane sends no build secret to an agent without
// it: that agent would ignore them and build without.
const CapabilityBuildSecrets = "build_secrets"

// LabelCommit is the image label naming the commit an image was built
// from; built images also carry LabelApp.
const LabelCommit = "dev.capstan.commit"

// BuildSpec is how to build a deployment's image from git.
type BuildSpec struct {
	// CloneURL is the repository's https:// URL (without credentials).
	CloneURL string `json:"clone_url"`
	// Repository is its full name (owner/name), for messages.
	Repository string `json:"repository"`
	// Commit is the exact commit to build: 40 hexadecimal digits.
	Commit string `json:"commit"`
	// Dockerfile is the Dockerfile's path in the repository ("" means
	// Dockerfile at the root of Context).
	Dockerfile string `json:"dockerfile"`
	// Context is the build context's directory in the repository ("" or
	// "." means the root).
	Context string `json:"context"`
	// BuildArgKeys name the build arguments; their values are the job
	// secrets SecretBuildArgPrefix + key.
	BuildArgKeys []string `json:"build_arg_keys,omitempty"`
	// BuildSecretKeys name the build secrets (their ids in the
	// Dockerfile's secret mounts); their values are the job secrets
	// SecretBuildSecretPrefix + id. Nil means none: the engine's legacy
	// builder builds, as before the field.
	BuildSecretKeys []string `json:"build_secret_keys,omitempty"`
}

// BuildResult reports a build.
type BuildResult struct {
	Commit  string `json:"commit"`
	ImageID string `json:"image_id"`
	// FetchMillis and BuildMillis are how long the fetch of the commit
	// and the image build took.
	FetchMillis int64 `json:"fetch_ms"`
	BuildMillis int64 `json:"build_ms"`
	// Steps and CachedSteps count the Dockerfile's steps and those the
	// builder took from its cache. A BuildKit build (one with build
	// secrets) counts the steps it runs as vertexes: the commands and
	// copies, not the settings such as ENV or LABEL.
	Steps       int `json:"steps"`
	CachedSteps int `json:"cached_steps"`
}

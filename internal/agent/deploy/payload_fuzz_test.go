package deploy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// FuzzDeployPayload decodes arbitrary app.deploy and app.remove payloads
// and checks them as the executors do before touching Docker or systemd.
// Nothing panics, and a payload the checks accept is one the release can
// use: a health path that is an absolute path, a health timeout within
// bounds, environment names without = or NUL, and for a build a commit of
// 40 hexadecimal digits and build secret ids that are plain names (a
// step mounts each at /run/secrets/ID).
func FuzzDeployPayload(f *testing.F) {
	for _, s := range []string{
		`{"app_id":"app_1","deployment_id":"dep_1","image":"nginx:1","container_port":80,"health_path":"/health","env_keys":["A"]}`,
		`{"app_id":"app_1","deployment_id":"dep_1","image_id":"sha256:00","container_port":65535,"health_timeout_seconds":3600}`,
		`{"app_id":"app_1","deployment_id":"dep_1","image":"x","container_port":1,"build":{"clone_url":"https://git.example.com/r.git","commit":"0123456789abcdef0123456789abcdef01234567"}}`,
		`{"app_id":"app_1","deployment_id":"dep_1","image":"x","container_port":1,"build":{"clone_url":"https://git.example.com/r.git","commit":"0123456789abcdef0123456789abcdef01234567","build_secret_keys":["NPM","../x"]}}`,
		`{"app_id":"app_1","app_name":"web","deployment_id":"dep_01","service":{"start_command":"./run","build_command":"make"},"build":{"commit":"0123456789abcdef0123456789abcdef01234567"}}`,
		`{"app_id":"app_1","deployment_id":"d","image":"x","container_port":80,"health_path":"//evil.example/"}`,
		`{"app_id":"app_1","deployment_id":"d","image":"x","container_port":80,"health_timeout_seconds":-1,"memory_limit_bytes":-5}`,
		`{"app_id":"../x","deployment_id":"d","image":"x","container_port":0}`,
		`{"app_id":"app_1","proxy":{"sites":[{"hostname":"a.test","app_id":"app_1","tls_mode":"internal"}]}}`,
		`null`, `{}`, `[]`, `{"service":{}}`, `{"build":{}}`, `{"compose":{}}`,
	} {
		f.Add([]byte(s))
	}
	secrets := map[string]string{"A": "a", "B": "b", agentproto.SecretGitToken: "t", agentproto.SecretBuildSecretPrefix + "NPM": "n",
		agentproto.SecretBuildSecretPrefix + "../x": "x", agentproto.SecretBuildSecretPrefix + ".x": "x"}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if p, err := agentproto.AppDeploy.DecodePayload(payload); err == nil {
			if p.Service != nil {
				err = checkService(&p)
			} else {
				err = checkDeploy(&p)
			}
			if err == nil {
				if !strings.HasPrefix(p.HealthPath, "/") || strings.HasPrefix(p.HealthPath, "//") {
					t.Fatalf("accepted health path %q", p.HealthPath)
				}
				if d := time.Duration(p.HealthTimeoutSeconds) * time.Second; d <= 0 || d > MaxHealthTimeout {
					t.Fatalf("accepted health timeout %d s", p.HealthTimeoutSeconds)
				}
				for _, k := range p.EnvKeys {
					if k == "" || strings.ContainsAny(k, "=\x00") {
						t.Fatalf("accepted environment name %q", k)
					}
				}
				_, _ = environment(p.EnvKeys, secrets)
				if p.Build != nil && p.ImageID == "" && p.Service == nil {
					in, err := checkBuild(p, secrets)
					if err == nil && !commitPattern.MatchString(p.Build.Commit) {
						t.Fatalf("accepted build commit %q", p.Build.Commit)
					}
					for id := range in.secrets {
						if strings.ContainsAny(id, "/\\\x00") || strings.HasPrefix(id, ".") || len(id) > 64 {
							t.Fatalf("accepted build secret id %q", id)
						}
					}
				}
			}
		}
		var r agentproto.RemovePayload
		if err := json.Unmarshal(payload, &r); err == nil && checkAppID(r.AppID) == nil && (strings.ContainsAny(r.AppID, "/\x00") || strings.HasPrefix(r.AppID, ".")) {
			t.Fatalf("accepted application id %q", r.AppID)
		}
	})
}

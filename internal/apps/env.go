package apps

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// HasEnvKey reports whether an application's env has key.
func (s *Service) HasEnvKey(ctx context.Context, appID, key string) (bool, error) {
	a, err := s.store.App(ctx, appID)
	if err != nil {
		return false, err
	}
	return slices.Contains(a.EnvKeys, key), nil
}

// ValidateEnvKey adds the problem of an env key to errs under field.
func ValidateEnvKey(key, field string, errs *fault.Fields) {
	var fe fault.Fields
	validateEnv([]EnvVar{{Key: key}}, &fe)
	for _, f := range fe {
		errs.Add(field, "%s", f.Message)
	}
}

// SetEnvValue sets key to value in an application's env, kept for its
// next deployment: nothing is redeployed. Concurrent changes of the env
// are not lost: the sealed env is replaced only if it did not change
// since it was read, and read again otherwise.
func (s *Service) SetEnvValue(ctx context.Context, appID, key, value string) error {
	for {
		old, env, err := s.appEnv(ctx, appID)
		if err != nil {
			return err
		}
		found := false
		for i := range env {
			if env[i].Key == key {
				env[i].Value, found = value, true
			}
		}
		if !found {
			env = append(env, EnvVar{Key: key, Value: value})
		}
		sealed, err := s.sealEnv("applications", appID, env)
		if err != nil {
			return err
		}
		err = s.store.ReplaceAppEnv(ctx, appID, old, sealed, envKeys(env), s.now().UTC())
		if fe := fault.As(err); fe != nil && fe.Code == "env-changed" {
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// EnvChange changes some variables of an application's env: Set adds a
// variable (at the end) or replaces its value where it is, Remove takes
// one out. The other variables keep their values, which nobody reads.
type EnvChange struct {
	Set    []EnvVar
	Remove []string
}

// ChangeEnv applies an EnvChange for the application's next deployment:
// nothing is redeployed. It is how an editor that never reads the values
// (they are write-only) changes the env. A removed key must be in the env.
// Concurrent changes are not lost: the sealed env is replaced only if it
// did not change since it was read, and read again otherwise.
func (s *Service) ChangeEnv(ctx context.Context, c audit.Caller, id string, ch EnvChange) (ApplicationDetail, error) {
	var errs fault.Fields
	if len(ch.Set) == 0 && len(ch.Remove) == 0 {
		errs.Add("set", "name at least one variable to set or remove")
	}
	var fe fault.Fields
	validateEnv(ch.Set, &fe)
	for _, f := range fe {
		errs.Add("set"+strings.TrimPrefix(f.Field, "env"), "%s", f.Message)
	}
	setting := map[string]bool{}
	for _, e := range ch.Set {
		setting[e.Key] = true
	}
	removing := map[string]bool{}
	for i, k := range ch.Remove {
		field := fmt.Sprintf("remove[%d]", i)
		switch {
		case !envKeyPattern.MatchString(k) || len(k) > MaxEnvKeyLen:
			errs.Add(field, "must be letters, digits and '_', not starting with a digit, at most %d characters", MaxEnvKeyLen)
		case removing[k]:
			errs.Add(field, "is a duplicate")
		case setting[k]:
			errs.Add(field, "is also set: set it or remove it")
		}
		removing[k] = true
	}
	if err := errs.Err(); err != nil {
		return ApplicationDetail{}, err
	}
	var keys []string
	for {
		a, err := s.store.App(ctx, id)
		if err != nil {
			return ApplicationDetail{}, err
		}
		if a.State == StateRemoving {
			return ApplicationDetail{}, errRemoving()
		}
		old, env, err := s.appEnv(ctx, id)
		if err != nil {
			return ApplicationDetail{}, err
		}
		next := make([]EnvVar, 0, len(env)+len(ch.Set))
		present := map[string]bool{}
		for _, e := range env {
			present[e.Key] = true
			if !removing[e.Key] {
				next = append(next, e)
			}
		}
		for i, k := range ch.Remove {
			if !present[k] {
				errs.Add(fmt.Sprintf("remove[%d]", i), "%s is not in the application's env", k)
			}
		}
		for _, e := range ch.Set {
			i := slices.IndexFunc(next, func(n EnvVar) bool { return n.Key == e.Key })
			if i >= 0 {
				next[i].Value = e.Value
			} else {
				next = append(next, e)
			}
		}
		if len(next) > MaxEnvVars {
			errs.Add("set", "the env would have %d variables: at most %d", len(next), MaxEnvVars)
		}
		if err := errs.Err(); err != nil {
			return ApplicationDetail{}, err
		}
		sealed, err := s.sealEnv("applications", id, next)
		if err != nil {
			return ApplicationDetail{}, err
		}
		keys = envKeys(next)
		err = s.store.ReplaceAppEnv(ctx, id, old, sealed, keys, s.now().UTC())
		if fe := fault.As(err); fe != nil && fe.Code == "env-changed" {
			if err := ctx.Err(); err != nil {
				return ApplicationDetail{}, err
			}
			continue
		}
		if err != nil {
			return ApplicationDetail{}, err
		}
		break
	}
	details := map[string]any{"fields": []string{"env"}, "env_keys": keys, "env_set": envKeys(ch.Set), "env_removed": nonNilKeys(ch.Remove)}
	if err := s.audit.Record(ctx, c, ActionUpdated, audit.Target{Type: "application", ID: id}, details); err != nil {
		return ApplicationDetail{}, err
	}
	return s.Get(ctx, id, Reading{Reader: jobs.AdminReader})
}

func envContext(prefix, id string) string { return prefix + ".env:" + id }

// sealList seals a list (an env, build arguments, build secrets) under
// context; an empty list is "".
func sealList[T any](k *secrets.Key, context string, list []T) (string, error) {
	if len(list) == 0 {
		return "", nil
	}
	b, err := json.Marshal(list)
	if err != nil {
		return "", err
	}
	return k.Seal(context, b), nil
}

// openList opens what sealList sealed; "" is nil.
func openList[T any](k *secrets.Key, context, sealed string) ([]T, error) {
	if sealed == "" {
		return nil, nil
	}
	b, err := k.Open(context, sealed)
	if err != nil {
		return nil, err
	}
	var list []T
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	return list, nil
}

func (s *Service) sealEnv(prefix, id string, env []EnvVar) (string, error) {
	return sealList(s.key, envContext(prefix, id), env)
}

// openEnv opens an env; none is an empty one.
func (s *Service) openEnv(prefix, id, sealed string) ([]EnvVar, error) {
	env, err := openList[EnvVar](s.key, envContext(prefix, id), sealed)
	if err == nil && env == nil {
		env = []EnvVar{}
	}
	return env, err
}

// appEnv is an application's env, sealed and open.
func (s *Service) appEnv(ctx context.Context, id string) (string, []EnvVar, error) {
	sealed, err := s.store.AppEnv(ctx, id)
	if err != nil {
		return "", nil, err
	}
	env, err := s.openEnv("applications", id, sealed)
	return sealed, env, err
}

// deploymentEnv is the env sealed to a deployment.
func (s *Service) deploymentEnv(ctx context.Context, id string) ([]EnvVar, error) {
	sealed, err := s.store.DeploymentEnv(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.openEnv("deployments", id, sealed)
}

func envKeys(env []EnvVar) []string {
	keys := make([]string, len(env))
	for i, e := range env {
		keys[i] = e.Key
	}
	return keys
}

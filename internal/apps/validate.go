package apps

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/capstan-dev/capstan/internal/fault"
)

// Limits of an application's settings.
const (
	MaxNameLen       = 63
	MaxHealthPathLen = 1024
	MaxEnvVars       = 200
	MaxEnvKeyLen     = 255
	MaxEnvValueBytes = 32 << 10
	MaxImageRefLen   = 512
	MaxTagLen        = 128
	MaxRepoNameLen   = 255
	// MinMemoryBytes is Docker's smallest memory limit.
	MinMemoryBytes = 6 << 20
)

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	memoryPattern = regexp.MustCompile(`^([0-9]{1,19})([bkmgBKMG])$`)
	// Docker's reference grammar (github.com/distribution/reference).
	pathComponentPattern = regexp.MustCompile(`^[a-z0-9]+(?:(?:__|[._]|-+)[a-z0-9]+)*$`)
	hostLabelPattern     = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$`)
	portPattern          = regexp.MustCompile(`^[0-9]{1,5}$`)
	ipv6HostPattern      = regexp.MustCompile(`^\[[0-9A-Fa-f:.]+\]$`)
	tagPattern           = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	sha256Pattern        = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	sha512Pattern        = regexp.MustCompile(`^sha512:[a-f0-9]{128}$`)
)

// NameProblem says what is wrong with an application name; "" if nothing.
func NameProblem(name string) string {
	switch {
	case name == "":
		return "is required"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("must be at most %d characters", MaxNameLen)
	case strings.ToLower(name) != name && namePattern.MatchString(strings.ToLower(name)):
		return "must be lowercase"
	case strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-"):
		return "must not start or end with '-'"
	case !namePattern.MatchString(name):
		return "must be a DNS label: lowercase letters, digits and '-'"
	}
	return ""
}

func hasControlOrSpace(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r <= 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) })
}

// ImageProblem says what is wrong with a Docker image reference
// (registry/namespace/name[:tag][@sha256:…]); "" if nothing.
func ImageProblem(ref string) string {
	if ref == "" {
		return "is required"
	}
	if len(ref) > MaxImageRefLen {
		return fmt.Sprintf("must be at most %d characters", MaxImageRefLen)
	}
	if hasControlOrSpace(ref) {
		return "must not contain spaces or control characters"
	}
	name := ref
	if at := strings.IndexByte(ref, '@'); at >= 0 {
		name = ref[:at]
		digest := ref[at+1:]
		if !sha256Pattern.MatchString(digest) && !sha512Pattern.MatchString(digest) {
			return "digest must be sha256: followed by 64 lowercase hex digits"
		}
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		tag := name[i+1:]
		name = name[:i]
		switch {
		case tag == "":
			return "tag must not be empty"
		case len(tag) > MaxTagLen:
			return fmt.Sprintf("tag must be at most %d characters", MaxTagLen)
		case !tagPattern.MatchString(tag):
			return "tag must be letters, digits, '_', '.' and '-', not starting with '.' or '-'"
		}
	}
	if name == "" {
		return "must name a repository"
	}
	if len(name) > MaxRepoNameLen {
		return fmt.Sprintf("repository name must be at most %d characters", MaxRepoNameLen)
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 {
		first := parts[0]
		// As Docker decides: the first component is a registry when it
		// has a '.' or ':', is localhost, or has uppercase letters.
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			if p := registryProblem(first); p != "" {
				return p
			}
			parts = parts[1:]
		}
	}
	for _, p := range parts {
		if p == "" {
			return "repository path must not have empty components"
		}
		if !pathComponentPattern.MatchString(p) {
			if pathComponentPattern.MatchString(strings.ToLower(p)) {
				return "repository name must be lowercase"
			}
			return fmt.Sprintf("repository path component %q must be lowercase letters and digits separated by '.', '_', '__' or '-'", p)
		}
	}
	return ""
}

func registryProblem(host string) string {
	h := host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		port := host[i+1:]
		h = host[:i]
		if !portPattern.MatchString(port) {
			return "registry port must be a number"
		}
		if n, _ := strconv.Atoi(port); n < 1 || n > 65535 {
			return "registry port must be between 1 and 65535"
		}
	}
	if ipv6HostPattern.MatchString(h) {
		return ""
	}
	for _, l := range strings.Split(h, ".") {
		if !hostLabelPattern.MatchString(l) {
			return fmt.Sprintf("registry %q is not a valid host name", host)
		}
	}
	return ""
}

// HealthPathProblem says what is wrong with a health check path.
func HealthPathProblem(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return "must start with '/'"
	case len(p) > MaxHealthPathLen:
		return fmt.Sprintf("must be at most %d characters", MaxHealthPathLen)
	case hasControlOrSpace(p):
		return "must not contain spaces or control characters"
	}
	return ""
}

// PortProblem says what is wrong with a container port.
func PortProblem(p int) string {
	if p < 1 || p > 65535 {
		return "must be between 1 and 65535"
	}
	return ""
}

// ParseMemory parses a memory limit such as 512m, 1g or 262144k (units b,
// k, m, g, case-insensitive; powers of 1024). "" means no limit (0).
func ParseMemory(s string) (int64, string) {
	if s == "" {
		return 0, ""
	}
	m := memoryPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, "must be a number with a unit b, k, m or g, e.g. 512m or 1g"
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, "is too large"
	}
	unit := int64(1)
	switch strings.ToLower(m[2]) {
	case "k":
		unit = 1 << 10
	case "m":
		unit = 1 << 20
	case "g":
		unit = 1 << 30
	}
	if n > math.MaxInt64/unit {
		return 0, "is too large"
	}
	b := n * unit
	if b < MinMemoryBytes {
		return 0, "must be at least 6m"
	}
	return b, ""
}

// keyProblem says what is wrong with the key of a list's entry: at most
// max characters matching pattern (shape says how otherwise), not one
// seen before.
func keyProblem(key string, max int, pattern *regexp.Regexp, seen map[string]bool, shape string) string {
	switch {
	case key == "":
		return "is required"
	case len(key) > max:
		return fmt.Sprintf("must be at most %d characters", max)
	case !pattern.MatchString(key):
		return shape
	case seen[key]:
		return "is a duplicate"
	}
	return ""
}

// validateEnv checks an environment list into errs.
func validateEnv(env []EnvVar, errs *fault.Fields) {
	if len(env) > MaxEnvVars {
		errs.Add("env", "at most %d variables", MaxEnvVars)
		return
	}
	seen := map[string]bool{}
	for i, e := range env {
		if p := keyProblem(e.Key, MaxEnvKeyLen, envKeyPattern, seen, "must be letters, digits and '_', not starting with a digit"); p != "" {
			errs.Add(fmt.Sprintf("env[%d].key", i), "%s", p)
		}
		seen[e.Key] = true
		val := fmt.Sprintf("env[%d].value", i)
		if len(e.Value) > MaxEnvValueBytes {
			errs.Add(val, "must be at most %d bytes", MaxEnvValueBytes)
		} else if strings.IndexByte(e.Value, 0) >= 0 {
			errs.Add(val, "must not contain NUL characters")
		}
	}
}

// validateSource checks a source's fields into errs (whether a git
// source's repository can be read is checked with the git host).
func validateSource(src Source, errs *fault.Fields) {
	switch src.Type {
	case SourceImage:
		if p := ImageProblem(src.Image); p != "" {
			errs.Add("source.image", "%s", p)
		}
		if src.InstallationID != 0 || src.RepoID != 0 || src.Branch != "" {
			errs.Add("source", "installation_id, repo_id and branch are only for git sources")
		}
	case SourceGit:
		if src.InstallationID < 1 {
			errs.Add("source.installation_id", "is required (at least 1)")
		}
		if src.RepoID < 1 {
			errs.Add("source.repo_id", "is required (at least 1)")
		}
		if p := RefProblem(src.Branch); p != "" {
			errs.Add("source.branch", "%s", p)
		}
		if src.Image != "" {
			errs.Add("source.image", "is only for image sources")
		}
	default:
		errs.Add("source.type", "must be image or git")
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

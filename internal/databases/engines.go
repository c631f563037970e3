package databases

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/apps"
)

// Engine is a database engine with the versions Capstan runs.
type Engine struct {
	Name        string          `json:"name" enum:"postgres,mysql,mariadb,redis,valkey"`
	Kind        string          `json:"kind" enum:"sql,kv" doc:"sql: query console and explore; kv: the key-value browser"`
	DefaultPort int             `json:"default_port"`
	Versions    []EngineVersion `json:"versions" doc:"Supported majors, newest first"`
}

// EngineVersion is a supported version of an engine and the container
// image a managed instance of it runs.
type EngineVersion struct {
	Version string `json:"version"`
	Default bool   `json:"default" doc:"The version used when none is named; one per engine"`
	Image   string `json:"image" doc:"The container image of this version: the official image unless the control plane's image file names another"`
}

// builtin lists the engines with their versions, newest first, and the
// official image of each. The first version is the default.
var builtin = []Engine{
	{Name: agentproto.EnginePostgres, Kind: agentproto.EngineKindSQL, DefaultPort: 5432, Versions: []EngineVersion{
		{Version: "17", Image: "postgres:17"}, {Version: "16", Image: "postgres:16"}, {Version: "15", Image: "postgres:15"},
		{Version: "14", Image: "postgres:14"}, {Version: "13", Image: "postgres:13"}}},
	{Name: agentproto.EngineMySQL, Kind: agentproto.EngineKindSQL, DefaultPort: 3306, Versions: []EngineVersion{
		{Version: "8.4", Image: "mysql:8.4"}, {Version: "8.0", Image: "mysql:8.0"}}},
	{Name: agentproto.EngineMariaDB, Kind: agentproto.EngineKindSQL, DefaultPort: 3306, Versions: []EngineVersion{
		{Version: "11.4", Image: "mariadb:11.4"}, {Version: "10.11", Image: "mariadb:10.11"}, {Version: "10.6", Image: "mariadb:10.6"}}},
	{Name: agentproto.EngineRedis, Kind: agentproto.EngineKindKV, DefaultPort: 6379, Versions: []EngineVersion{
		{Version: "7.4", Image: "redis:7.4"}, {Version: "7.2", Image: "redis:7.2"}}},
	{Name: agentproto.EngineValkey, Kind: agentproto.EngineKindKV, DefaultPort: 6379, Versions: []EngineVersion{
		{Version: "8", Image: "valkey/valkey:8"}, {Version: "7.2", Image: "valkey/valkey:7.2"}}},
}

// Catalog is the engines with the image of each version. The zero value
// is not usable; use DefaultCatalog or LoadCatalog.
type Catalog struct {
	engines []Engine
}

// DefaultCatalog returns the engines with their official images.
func DefaultCatalog() Catalog {
	c := Catalog{engines: make([]Engine, len(builtin))}
	for i, e := range builtin {
		e.Versions = slices.Clone(e.Versions)
		e.Versions[0].Default = true
		c.engines[i] = e
	}
	return c
}

// ParseImages returns the default catalog with the images that an image
// file names instead. The file is a JSON object of engine name to an
// object of version to image reference:
//
//	{"postgres": {"17": "registry.example.com/postgres:17"}, "redis": {"7.4": "registry.example.com/redis:7.4"}}
//
// Versions not named keep their official image. An unknown engine or
// version, a reference that is not a valid image reference, or anything
// but such an object is an error that says where.
func ParseImages(data []byte) (Catalog, error) {
	c := DefaultCatalog()
	var m map[string]map[string]string
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return Catalog{}, fmt.Errorf(`not a JSON object of engine to {"version": "image"}: %w`, err)
	}
	if dec.More() {
		return Catalog{}, fmt.Errorf("more than one JSON value")
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		i := slices.IndexFunc(c.engines, func(e Engine) bool { return e.Name == name })
		if i < 0 {
			return Catalog{}, fmt.Errorf("unknown engine %q (known: %s)", name, strings.Join(c.names(), ", "))
		}
		e := &c.engines[i]
		versions := make([]string, 0, len(m[name]))
		for v := range m[name] {
			versions = append(versions, v)
		}
		sort.Strings(versions)
		for _, v := range versions {
			j := slices.IndexFunc(e.Versions, func(ev EngineVersion) bool { return ev.Version == v })
			if j < 0 {
				known := make([]string, len(e.Versions))
				for k, ev := range e.Versions {
					known[k] = ev.Version
				}
				return Catalog{}, fmt.Errorf("%s: unknown version %q (supported: %s)", name, v, strings.Join(known, ", "))
			}
			img := m[name][v]
			if p := apps.ImageProblem(img); p != "" {
				return Catalog{}, fmt.Errorf("%s %s: image %q %s", name, v, img, p)
			}
			e.Versions[j].Image = img
		}
	}
	return c, nil
}

// LoadCatalog reads an image file (see ParseImages); path "" means the
// official images.
func LoadCatalog(path string) (Catalog, error) {
	if path == "" {
		return DefaultCatalog(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Catalog{}, fmt.Errorf("database images file: %w", err)
	}
	c, err := ParseImages(b)
	if err != nil {
		return Catalog{}, fmt.Errorf("database images file %s: %w", path, err)
	}
	return c, nil
}

// Engines returns every engine, in a fixed order.
func (c Catalog) Engines() []Engine {
	out := make([]Engine, len(c.engines))
	for i, e := range c.engines {
		e.Versions = slices.Clone(e.Versions)
		out[i] = e
	}
	return out
}

// Engine returns the engine named name.
func (c Catalog) Engine(name string) (Engine, bool) {
	for _, e := range c.engines {
		if e.Name == name {
			return e, true
		}
	}
	return Engine{}, false
}

// LoadImage returns the version of engine whose image loads a backup or
// dump made by version: version itself when it has an image, else the
// newest version above it (agentproto.LoadVersion: never an older one);
// versions are every version of engine with an image, newest first.
// ok is false when none is at or above version.
func (c Catalog) LoadImage(engine, version string) (v EngineVersion, versions []string, ok bool) {
	e, known := c.Engine(engine)
	if !known {
		return EngineVersion{}, nil, false
	}
	for _, ev := range e.Versions {
		if ev.Image != "" {
			versions = append(versions, ev.Version)
		}
	}
	picked, ok := agentproto.LoadVersion(version, versions)
	if !ok {
		return EngineVersion{}, versions, false
	}
	i := slices.IndexFunc(e.Versions, func(ev EngineVersion) bool { return ev.Version == picked })
	return e.Versions[i], versions, true
}

func (c Catalog) names() []string {
	out := make([]string, len(c.engines))
	for i, e := range c.engines {
		out[i] = e.Name
	}
	return out
}

// versionOf returns the listed version an engine's reported version
// belongs to ("16.4" → "16", "10.11.6-MariaDB-0+deb12u1" → "10.11",
// "8.0.2" → "8" for Valkey), or, for a version Capstan does not list, its
// major as the engine numbers them (the first number for PostgreSQL from
// 10 on, the first two otherwise). "" when it has no leading number.
func (c Catalog) versionOf(engine, reported string) string {
	num := reported
	if i := strings.IndexFunc(num, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		num = num[:i]
	}
	num = strings.Trim(num, ".")
	if num == "" {
		return ""
	}
	if e, ok := c.Engine(engine); ok {
		for _, v := range e.Versions {
			if num == v.Version || strings.HasPrefix(num, v.Version+".") {
				return v.Version
			}
		}
	}
	parts := strings.Split(num, ".")
	if engine == agentproto.EnginePostgres && len(parts[0]) >= 2 || len(parts) == 1 {
		return parts[0]
	}
	return parts[0] + "." + parts[1]
}

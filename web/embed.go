// Package web holds the web console, built by Vite from this directory
// into dist/ and embedded in the control plane. A tree where the console
// was never built embeds only dist/.keep; the control plane then serves a
// page that says how to build it.
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Dist returns the built console: index.html and assets/.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded; Sub fails only on a bad name
	}
	return sub
}

package testlab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// SavedImage is an image as the engine exports it (docker save), with
// its history (docker history --no-trunc): everything of an image that
// leaves the server when it is pushed or exported.
type SavedImage struct {
	// Files are the image's files by path (no leading /): each layer's
	// over the layers below it.
	Files map[string][]byte
	// entries are every part of the export, by where it is: the archive's
	// own files (manifest, configuration, layers) and each layer's files.
	entries map[string][]byte
	// history is the image's history as the engine's API answers it.
	history []byte
}

// SaveImage exports the image ref through the engine's API and reads
// its history.
func SaveImage(t testing.TB, cli *client.Client, ref string) SavedImage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := saveImage(ctx, cli, ref)
	if err != nil {
		t.Fatalf("exporting image %s: %v", ref, err)
	}
	return s
}

func saveImage(ctx context.Context, cli *client.Client, ref string) (SavedImage, error) {
	s := SavedImage{Files: map[string][]byte{}, entries: map[string][]byte{}}
	h, err := cli.ImageHistory(ctx, ref)
	if err != nil {
		return s, fmt.Errorf("history: %w", err)
	}
	if s.history, err = json.Marshal(h.Items); err != nil {
		return s, err
	}
	rc, err := cli.ImageSave(ctx, []string{ref})
	if err != nil {
		return s, err
	}
	defer rc.Close()
	archive := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, fmt.Errorf("reading the export: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return s, err
		}
		archive[hdr.Name] = b
		s.entries[hdr.Name] = b
	}
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(archive["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		return s, fmt.Errorf("the export's manifest.json (%v) names no one image", err)
	}
	for _, l := range manifest[0].Layers {
		files, err := layerFiles(archive[l])
		if err != nil {
			return s, fmt.Errorf("layer %s: %w", l, err)
		}
		for name, b := range files {
			s.entries[l+":"+name] = b
			if base := path.Base(name); strings.HasPrefix(base, ".wh.") {
				delete(s.Files, path.Join(path.Dir(name), strings.TrimPrefix(base, ".wh.")))
				continue
			}
			s.Files[name] = b
		}
	}
	return s, nil
}

// layerFiles reads a layer's regular files, the layer plain or gzipped.
func layerFiles(layer []byte) (map[string][]byte, error) {
	var r io.Reader = bytes.NewReader(layer)
	if bytes.HasPrefix(layer, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")] = b
	}
}

// Holding names where value is in the export or the history ("history",
// an archive file, or layer:path for a layer's file); nil if nowhere.
func (s SavedImage) Holding(value string) []string {
	var at []string
	if bytes.Contains(s.history, []byte(value)) {
		at = append(at, "history")
	}
	for name, b := range s.entries {
		if bytes.Contains(b, []byte(value)) {
			at = append(at, name)
		}
	}
	return at
}

package testlab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// LoopFilesystem makes a small real ext4 filesystem of sizeMiB with room
// for inodes files, loop-mounts it at a new directory and returns that
// directory; it is unmounted when the test ends. Agents report it like any
// disk, so a test fills it (bytes or inodes) to drive disk alerts. It
// needs root, mkfs.ext4 and a free loop device.
func LoopFilesystem(t testing.TB, sizeMiB, inodes int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Require(t, "root (to loop-mount a filesystem)")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		Require(t, "mkfs.ext4 (e2fsprogs)")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := exec.CommandContext(ctx, "truncate", "-s", fmt.Sprintf("%dM", sizeMiB), img).Run(); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	for _, c := range [][]string{{"mkfs.ext4", "-q", "-F", "-m", "0", "-N", fmt.Sprint(inodes), img}, {"mount", "-o", "loop", img, mnt}} {
		if res := RunCommand(t, ctx, exec.CommandContext(ctx, c[0], c[1:]...), c[0]); res.ExitCode != 0 {
			t.Fatalf("%v: exit %d: %s", c, res.ExitCode, res.Stderr)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "umount", mnt).CombinedOutput(); err != nil {
			// Busy for a moment after the test's last write: detach lazily.
			if out2, err2 := exec.CommandContext(ctx, "umount", "-l", mnt).CombinedOutput(); err2 != nil {
				t.Errorf("umount %s: %v %s; %v %s", mnt, err, out, err2, out2)
			}
		}
	})
	return mnt
}

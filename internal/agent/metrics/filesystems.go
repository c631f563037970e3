package metrics

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// mount is one line of /proc/self/mounts.
type mount struct {
	device, dir, fstype string
}

// parseMounts reads /proc/self/mounts (fstab(5) format: device, mount
// point, type, options…; spaces and other characters octal-escaped).
func parseMounts(r io.Reader) ([]mount, error) {
	var ms []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		ms = append(ms, mount{device: unescapeMount(f[0]), dir: unescapeMount(f[1]), fstype: f[2]})
	}
	return ms, sc.Err()
}

// unescapeMount decodes the \ooo octal escapes of a mounts field.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// ignoredFSTypes are not reported as filesystems: kernel pseudo and virtual
// filesystems, memory-backed ones, read-only images that are always full
// (squashfs snaps, ISO images), container layers, and network filesystems,
// whose statfs can block for as long as their server is unreachable and
// would stall the sampler.
var ignoredFSTypes = map[string]bool{
	// pseudo and virtual
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "devfs": true,
	"cgroup": true, "cgroup2": true, "nsfs": true, "autofs": true, "mqueue": true,
	"debugfs": true, "tracefs": true, "securityfs": true, "pstore": true, "bpf": true,
	"fusectl": true, "configfs": true, "hugetlbfs": true, "binfmt_misc": true,
	"efivarfs": true, "selinuxfs": true, "rpc_pipefs": true, "nfsd": true, "fuse": true,
	// memory-backed
	"tmpfs": true, "ramfs": true,
	// images and container layers
	"squashfs": true, "iso9660": true, "udf": true, "overlay": true, "aufs": true,
	// network
	"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "smbfs": true, "ceph": true,
	"glusterfs": true, "9p": true, "afs": true, "lustre": true, "davfs": true,
}

// realFilesystem reports whether a mount of this type is reported.
// FUSE filesystems (fuse.sshfs, fuse.lxcfs, fuse.gvfsd-fuse…) are mostly
// virtual or remote and are skipped; fuseblk (ntfs-3g, exfat on a block
// device) is local and kept.
func realFilesystem(fstype string) bool {
	return !ignoredFSTypes[fstype] && !strings.HasPrefix(fstype, "fuse.")
}

// realMounts keeps the mounts of real filesystems, one per device (a bind
// mount or btrfs subvolume repeats its device; the shortest mount point
// wins), sorted by mount point and at most agentproto.MaxFilesystemsSample.
func realMounts(ms []mount) []mount {
	byDevice := map[string]int{}
	var out []mount
	for _, m := range ms {
		if !realFilesystem(m.fstype) || !strings.HasPrefix(m.dir, "/") {
			continue
		}
		if i, ok := byDevice[m.device]; ok {
			if len(m.dir) < len(out[i].dir) {
				out[i] = m
			}
			continue
		}
		byDevice[m.device] = len(out)
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b mount) int { return cmp.Compare(a.dir, b.dir) })
	if len(out) > agentproto.MaxFilesystemsSample {
		out = out[:agentproto.MaxFilesystemsSample]
	}
	return out
}

// fsUsage is the statfs(2) of a mounted filesystem.
type fsUsage struct {
	bytesTotal, bytesUsed, inodesTotal, inodesUsed uint64
}

// statfs measures the filesystem mounted at path. Used bytes are what df
// calls used: blocks − free blocks (the root-reserved blocks are free).
// Filesystems without inode counts (btrfs) report 0 inodes.
func statfs(path string) (fsUsage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return fsUsage{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Frsize)
	if bs == 0 {
		bs = uint64(st.Bsize)
	}
	u := fsUsage{
		bytesTotal:  st.Blocks * bs,
		bytesUsed:   (st.Blocks - min(st.Bfree, st.Blocks)) * bs,
		inodesTotal: st.Files,
		inodesUsed:  st.Files - min(st.Ffree, st.Files),
	}
	return u, nil
}

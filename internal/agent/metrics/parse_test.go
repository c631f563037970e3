package metrics

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseCPUTimesAndPercent(t *testing.T) {
	prev, err := parseCPUTimes(open(t, "stat.1"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := parseCPUTimes(open(t, "stat.2"))
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+idle+iowait+irq+softirq+steal; guest is in user.
	if got, want := prev, (cpuTimes{total: 10000 + 100 + 5000 + 80000 + 2000 + 0 + 500 + 400, idle: 80000 + 2000}); got != want {
		t.Fatalf("first reading = %+v, want %+v", got, want)
	}
	// Δtotal 2000, Δidle+iowait 1000.
	if got, want := cpuPercent(prev, cur), 50.0; got != want {
		t.Errorf("cpuPercent = %v, want %v", got, want)
	}
	if got, want := cpuPercent(cur, cur), 0.0; got != want {
		t.Errorf("cpuPercent without elapsed ticks = %v, want %v", got, want)
	}
	// iowait going backwards counts as fully busy, never below 0 or over 100.
	back := cpuTimes{total: cur.total + 100, idle: cur.idle - 50}
	if got, want := cpuPercent(cur, back), 100.0; got != want {
		t.Errorf("cpuPercent with idle going backwards = %v, want %v", got, want)
	}
	if _, err := parseCPUTimes(strings.NewReader("intr 1 2 3\n")); err == nil {
		t.Error("parseCPUTimes without a cpu line: no error")
	}
	if _, err := parseCPUTimes(strings.NewReader("cpu  1 2\n")); err == nil {
		t.Error("parseCPUTimes with a short cpu line: no error")
	}
}

func TestParseMeminfoUsedExcludesCache(t *testing.T) {
	m, err := parseMeminfo(open(t, "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	const kB = 1024
	if got, want := m.total, uint64(8000000*kB); got != want {
		t.Errorf("total = %d, want %d", got, want)
	}
	if got, want := m.available, uint64(6000000*kB); got != want {
		t.Errorf("available = %d, want %d", got, want)
	}
	// MemTotal − MemAvailable; the 5.5 GB of page cache is not used
	// memory (MemTotal − MemFree would say 7.7 GB).
	if got, want := m.used, uint64(2000000*kB); got != want {
		t.Errorf("used = %d, want %d (total − available)", got, want)
	}
	if got, want := m.swapTotal, uint64(2000000*kB); got != want {
		t.Errorf("swap total = %d, want %d", got, want)
	}
	if got, want := m.swapUsed, uint64(500000*kB); got != want {
		t.Errorf("swap used = %d, want %d", got, want)
	}
}

func TestParseMeminfoWithoutMemAvailable(t *testing.T) {
	m, err := parseMeminfo(open(t, "meminfo.no-available"))
	if err != nil {
		t.Fatal(err)
	}
	const kB = 1024
	// MemFree + Buffers + Cached + SReclaimable − Shmem
	// = 300000 + 100000 + 5500000 + 400000 − 200000.
	if got, want := m.available, uint64(6100000*kB); got != want {
		t.Errorf("estimated available = %d, want %d", got, want)
	}
	if got, want := m.used, uint64(1900000*kB); got != want {
		t.Errorf("used = %d, want %d", got, want)
	}
	if _, err := parseMeminfo(strings.NewReader("MemFree: 1 kB\n")); err == nil {
		t.Error("parseMeminfo without MemTotal: no error")
	}
}

func TestParseLoadavgAndUptime(t *testing.T) {
	l1, l5, l15, err := parseLoadavg(open(t, "loadavg"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := []float64{l1, l5, l15}, []float64{0.52, 0.58, 0.59}; !slices.Equal(got, want) {
		t.Errorf("load = %v, want %v", got, want)
	}
	up, err := parseUptime(open(t, "uptime"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := up, uint64(350735); got != want {
		t.Errorf("uptime = %d, want %d", got, want)
	}
	if _, _, _, err := parseLoadavg(strings.NewReader("0.1 0.2\n")); err == nil {
		t.Error("parseLoadavg with two fields: no error")
	}
	if _, err := parseUptime(strings.NewReader("")); err == nil {
		t.Error("parseUptime of nothing: no error")
	}
}

func TestRealMountsFiltersPseudoAndDedupes(t *testing.T) {
	ms, err := parseMounts(open(t, "mounts"))
	if err != nil {
		t.Fatal(err)
	}
	got := realMounts(ms)
	want := []mount{
		{device: "/dev/sda1", dir: "/", fstype: "ext4"},
		{device: "/dev/sda15", dir: "/boot/efi", fstype: "vfat"},
		{device: "/dev/mapper/vg-home", dir: "/home", fstype: "btrfs"}, // not /home/.snapshots
		{device: "/dev/sdc1", dir: "/media/usb", fstype: "fuseblk"},
		{device: "/dev/sdb1", dir: "/srv/my data", fstype: "xfs"}, // \040 decoded; not the bind mount
		{device: "tank/data", dir: "/tank/data", fstype: "zfs"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("real mounts:\n got %+v\nwant %+v", got, want)
	}
	for _, m := range got {
		switch m.fstype {
		case "tmpfs", "overlay", "squashfs", "nfs4", "fuse.sshfs", "proc", "cgroup2":
			t.Errorf("%s (%s) not filtered out", m.dir, m.fstype)
		}
	}
}

func TestRealMountsCapped(t *testing.T) {
	var ms []mount
	for i := range 100 {
		ms = append(ms, mount{device: "/dev/d" + strings.Repeat("x", i), dir: "/m" + strings.Repeat("x", i), fstype: "ext4"})
	}
	if got, want := len(realMounts(ms)), 64; got != want {
		t.Fatalf("%d mounts, want %d (agentproto.MaxFilesystemsSample)", got, want)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/srv/my\040data`:  "/srv/my data",
		`/a\011b\012c`:     "/a\tb\nc",
		`/back\134slash`:   `/back\slash`,
		`/plain`:           "/plain",
		`/trailing\04`:     `/trailing\04`,
		`/not\999an-octal`: `/not\999an-octal`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatfsOfATempDir(t *testing.T) {
	dir := t.TempDir()
	u, err := statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if u.bytesTotal == 0 || u.bytesUsed > u.bytesTotal {
		t.Fatalf("usage %+v: want 0 < used ≤ total", u)
	}
	if got, want := u.bytesTotal, st.Blocks*uint64(st.Frsize); got != want {
		t.Errorf("bytes total = %d, want blocks × fragment size = %d", got, want)
	}
	if u.inodesUsed > u.inodesTotal {
		t.Errorf("inodes used %d > total %d", u.inodesUsed, u.inodesTotal)
	}
	if _, err := statfs(filepath.Join(dir, "missing")); err == nil {
		t.Error("statfs of a missing path: no error")
	}
}

func TestNetRates(t *testing.T) {
	prev, err := parseNetDev(open(t, "netdev.1"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range prev {
		if virtualInterface(name) {
			t.Errorf("virtual interface %s was read", name)
		}
	}
	if got, want := len(prev), 3; got != want { // eth0, eth1, wg0
		t.Fatalf("%d interfaces read, want %d: %v", got, want, prev)
	}
	cur, err := parseNetDev(open(t, "netdev.2"))
	if err != nil {
		t.Fatal(err)
	}
	// eth0 +10 MB/+2 MB, wg0 +5000/+3000 over 10 s; eth1 was reset and
	// ens5 just appeared: neither counts.
	rx, tx := netRates(prev, cur, 10*time.Second)
	if got, want := rx, 1000500.0; got != want {
		t.Errorf("rx = %v B/s, want %v", got, want)
	}
	if got, want := tx, 200300.0; got != want {
		t.Errorf("tx = %v B/s, want %v", got, want)
	}
	if rx, tx := netRates(nil, cur, 10*time.Second); rx != 0 || tx != 0 {
		t.Errorf("rates without a baseline = %v, %v, want 0", rx, tx)
	}
	if rx, tx := netRates(prev, cur, 0); rx != 0 || tx != 0 {
		t.Errorf("rates over no time = %v, %v, want 0", rx, tx)
	}
}

package inventory

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

func TestParseHostPort(t *testing.T) {
	for _, c := range []struct {
		in   string
		addr string
		port int
	}{
		{"00000000:0016", "0.0.0.0", 22},
		{"0100007F:1538", "127.0.0.1", 5432},
		{"0F02000A:0016", "10.0.2.15", 22},
		{"3500007F:0035", "127.0.0.53", 53},
		{"00000000000000000000000000000000:0050", "::", 80},
		{"00000000000000000000000001000000:1F90", "::1", 8080},
		{"B80D0120000000000000000001000000:01BB", "2001:db8::1", 443},
		{"0000000000000000FFFF00000100007F:2382", "::ffff:127.0.0.1", 9090},
	} {
		addr, port, err := parseHostPort(c.in)
		if err != nil {
			t.Errorf("parseHostPort(%q): %v", c.in, err)
			continue
		}
		if got, want := addr, netip.MustParseAddr(c.addr); got != want {
			t.Errorf("parseHostPort(%q) address = %s, want %s", c.in, got, want)
		}
		if got, want := port, c.port; got != want {
			t.Errorf("parseHostPort(%q) port = %d, want %d", c.in, got, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:XYZ", "01007F:0016", "0100007G:0016"} {
		if _, _, err := parseHostPort(bad); err == nil {
			t.Errorf("parseHostPort(%q): no error", bad)
		}
	}
}

func TestParseSocketsListeningOnly(t *testing.T) {
	for _, c := range []struct {
		file string
		want []string // addr:port/inode
	}{
		{"tcp", []string{"0.0.0.0:22/1001", "127.0.0.1:5432/1002"}},
		{"tcp6", []string{"[::]:80/2001", "[::1]:8080/2002", "[2001:db8::1]:443/2003", "[::ffff:127.0.0.1]:9090/2004"}},
		{"udp", []string{"127.0.0.53:53/3001", "0.0.0.0:68/3002"}},
		{"udp6", []string{"[::]:5353/4001"}},
	} {
		f, err := os.Open(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		socks, err := parseSockets(f, c.file)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		var got []string
		for _, s := range socks {
			if s.proto != c.file {
				t.Errorf("%s: protocol %q", c.file, s.proto)
			}
			got = append(got, netip.AddrPortFrom(s.addr, uint16(s.port)).String()+"/"+strconv.FormatUint(s.inode, 10))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: listening sockets %v, want %v", c.file, got, c.want)
		}
	}
}

// procRoot is a fake host root with the testdata socket tables and
// processes holding sockets: pid → comm and fd links.
func procRoot(t *testing.T, procs map[int]proc) string {
	t.Helper()
	root := t.TempDir()
	for _, name := range []string{"tcp", "tcp6", "udp", "udp6"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, "proc/net", name), string(b))
	}
	setProcs(t, root, procs)
	// Not processes.
	writeFile(t, filepath.Join(root, "proc/self/comm"), "agent\n")
	writeFile(t, filepath.Join(root, "proc/meminfo"), "MemTotal: 1 kB\n")
	return root
}

type proc struct {
	comm  string
	links []string // fd link targets
}

func setProcs(t *testing.T, root string, procs map[int]proc) {
	t.Helper()
	for pid, p := range procs {
		dir := filepath.Join(root, "proc", strconv.Itoa(pid))
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "comm"), p.comm+"\n")
		if p.links == nil {
			continue // no fd directory: not readable
		}
		if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i, target := range p.links {
			if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestListeningPortsWithProcesses(t *testing.T) {
	root := procRoot(t, map[int]proc{
		// sshd and its child share the listening socket: the parent wins.
		456: {"sshd", []string{"/dev/null", "socket:[1001]"}},
		123: {"sshd", []string{"socket:[1001]", "pipe:[77]"}},
		200: {"postgres", []string{"socket:[1002]"}},
		300: {"nginx", []string{"socket:[2001]", "socket:[2003]"}},
		400: {"secret", nil}, // fds not readable
	})
	p := &portScanner{root: root}
	got, err := p.list(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := []agentproto.ListeningPort{
		{Protocol: "tcp", Address: "0.0.0.0", Port: 22, Process: "sshd", PID: 123},
		{Protocol: "tcp", Address: "127.0.0.1", Port: 5432, Process: "postgres", PID: 200},
		{Protocol: "tcp6", Address: "::", Port: 80, Process: "nginx", PID: 300},
		{Protocol: "tcp6", Address: "2001:db8::1", Port: 443, Process: "nginx", PID: 300},
		{Protocol: "tcp6", Address: "::1", Port: 8080},
		{Protocol: "tcp6", Address: "::ffff:127.0.0.1", Port: 9090},
		{Protocol: "udp", Address: "127.0.0.53", Port: 53},
		{Protocol: "udp", Address: "0.0.0.0", Port: 68},
		{Protocol: "udp6", Address: "::", Port: 5353},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ports:\n got %+v\nwant %+v", got, want)
	}
}

func TestListeningPortOwnersRememberedUntilANewSocket(t *testing.T) {
	root := procRoot(t, map[int]proc{200: {"postgres", []string{"socket:[1002]"}}})
	p := &portScanner{root: root}
	now := time.Now()
	owner5432 := func(now time.Time) string {
		t.Helper()
		ps, err := p.list(now)
		if err != nil {
			t.Fatal(err)
		}
		for _, lp := range ps {
			if lp.Port == 5432 {
				return lp.Process + "/" + strconv.Itoa(lp.PID)
			}
		}
		t.Fatal("5432 not listed")
		return ""
	}
	if got, want := owner5432(now), "postgres/200"; got != want {
		t.Fatalf("owner = %s, want %s", got, want)
	}
	// The socket moves to another process: not noticed while no new
	// socket appears (no scan of every process)…
	setProcs(t, root, map[int]proc{200: {"postgres", []string{}}, 201: {"pgbouncer", []string{"socket:[1002]"}}})
	if got, want := owner5432(now.Add(time.Minute)), "postgres/200"; got != want {
		t.Fatalf("owner without a rescan = %s, want the remembered %s", got, want)
	}
	// …but a new listening socket makes a scan…
	tcp, _ := os.ReadFile(filepath.Join(root, "proc/net/tcp"))
	writeFile(t, filepath.Join(root, "proc/net/tcp"), string(tcp)+
		"   4: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1010 1 0000000000000000 100 0 0 10 0\n")
	if got, want := owner5432(now.Add(2*time.Minute)), "pgbouncer/201"; got != want {
		t.Fatalf("owner after a new socket = %s, want %s", got, want)
	}
	// …and so does the periodic rescan.
	setProcs(t, root, map[int]proc{201: {"pgbouncer", []string{}}, 202: {"odyssey", []string{"socket:[1002]"}}})
	if got, want := owner5432(now.Add(2*time.Minute+ownerRescan)), "odyssey/202"; got != want {
		t.Fatalf("owner after the periodic rescan = %s, want %s", got, want)
	}
}

func TestListeningPortsWithoutProcNet(t *testing.T) {
	p := &portScanner{root: t.TempDir()}
	ps, err := p.list(time.Now())
	if err == nil || ps != nil {
		t.Fatalf("list = %v, %v; want nil and an error", ps, err)
	}
}

// TestListeningPortsOnThisHost opens listening sockets and finds them, with
// this process as their owner.
func TestListeningPortsOnThisHost(t *testing.T) {
	type want struct {
		proto, addr string
		port        int
	}
	var wants []want
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	wants = append(wants, want{"tcp", "127.0.0.1", tl.Addr().(*net.TCPAddr).Port})
	ul, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	wants = append(wants, want{"udp", "127.0.0.1", ul.LocalAddr().(*net.UDPAddr).Port})
	if l6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer l6.Close()
		wants = append(wants, want{"tcp6", "::1", l6.Addr().(*net.TCPAddr).Port})
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	p := &portScanner{root: "/"}
	ps, err := p.list(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wants {
		i := slices.IndexFunc(ps, func(lp agentproto.ListeningPort) bool {
			return lp.Protocol == w.proto && lp.Address == w.addr && lp.Port == w.port
		})
		if i < 0 {
			t.Errorf("%s %s:%d not listed", w.proto, w.addr, w.port)
			continue
		}
		if got, want := ps[i].PID, os.Getpid(); got != want {
			t.Errorf("%s %s:%d pid = %d, want %d", w.proto, w.addr, w.port, got, want)
		}
		if got, want := ps[i].Process, strings.TrimSpace(string(comm)); got != want {
			t.Errorf("%s %s:%d process = %q, want %q", w.proto, w.addr, w.port, got, want)
		}
	}
}

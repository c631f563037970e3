package inventory

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Socket states of /proc/net/{tcp,udp} (include/net/tcp_states.h).
const (
	stateListen = "0A" // TCP_LISTEN
	stateClose  = "07" // TCP_CLOSE: an unconnected UDP socket
)

// socketFiles are the socket tables read, by protocol.
var socketFiles = []struct{ proto, path string }{
	{"tcp", "proc/net/tcp"}, {"tcp6", "proc/net/tcp6"},
	{"udp", "proc/net/udp"}, {"udp6", "proc/net/udp6"},
}

// socket is a listening socket of a /proc/net table.
type socket struct {
	proto string
	addr  netip.Addr
	port  int
	inode uint64
}

// parseSockets reads a /proc/net/{tcp,tcp6,udp,udp6} table (proto names it)
// and returns its listening sockets: TCP sockets in LISTEN, and UDP sockets
// bound to a local port and not connected to a peer.
func parseSockets(r io.Reader, proto string) ([]socket, error) {
	udp := strings.HasPrefix(proto, "udp")
	var out []socket
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		local, remote, state := f[1], f[2], f[3]
		if udp {
			if state != stateClose || !strings.HasSuffix(remote, ":0000") {
				continue
			}
		} else if state != stateListen {
			continue
		}
		addr, port, err := parseHostPort(local)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", proto, err)
		}
		if port == 0 {
			continue
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: bad inode %q", proto, f[9])
		}
		out = append(out, socket{proto: proto, addr: addr, port: port, inode: inode})
	}
	return out, sc.Err()
}

// parseHostPort decodes a "HEXADDR:HEXPORT" of /proc/net. The address is
// printed as 32-bit words in host byte order (one word for IPv4, four for
// IPv6), the port as a plain hex number.
func parseHostPort(s string) (netip.Addr, int, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.Addr{}, 0, fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("bad port in %q", s)
	}
	var b [16]byte
	switch len(h) {
	case 8, 32:
		for i := 0; i < len(h)/8; i++ {
			w, err := strconv.ParseUint(h[i*8:i*8+8], 16, 32)
			if err != nil {
				return netip.Addr{}, 0, fmt.Errorf("bad address %q", s)
			}
			binary.NativeEndian.PutUint32(b[i*4:], uint32(w))
		}
	default:
		return netip.Addr{}, 0, fmt.Errorf("bad address %q", s)
	}
	if len(h) == 8 {
		return netip.AddrFrom4([4]byte(b[:4])), int(port), nil
	}
	return netip.AddrFrom16(b), int(port), nil
}

// owner is the process holding a socket; pid 0 means unknown.
type owner struct {
	pid  int
	name string
}

// ownerRescan is how long socket owners are remembered before every
// process is scanned again.
const ownerRescan = 5 * time.Minute

// portScanner lists listening ports with the processes that hold them.
// Finding a socket's process means reading every /proc/PID/fd link, so
// owners are remembered by socket inode (unique while the socket lives):
// processes are scanned only when a socket appears that was not seen
// before, or every ownerRescan. Sockets of processes the agent may not
// inspect stay without owner, silently.
type portScanner struct {
	root    string
	owners  map[uint64]owner // by socket inode; pid 0: not found
	scanned time.Time
}

func (p *portScanner) list(now time.Time) ([]agentproto.ListeningPort, error) {
	var socks []socket
	read := 0
	var firstErr error
	for _, f := range socketFiles {
		file, err := os.Open(filepath.Join(p.root, f.path))
		if err != nil {
			// No IPv6 in this kernel, or no /proc/net at all.
			if firstErr == nil && !os.IsNotExist(err) {
				firstErr = err
			}
			continue
		}
		s, err := parseSockets(file, f.proto)
		file.Close()
		if err != nil {
			return nil, err
		}
		read++
		socks = append(socks, s...)
	}
	if read == 0 {
		if firstErr == nil {
			firstErr = fmt.Errorf("no socket tables under %s", filepath.Join(p.root, "proc/net"))
		}
		return nil, firstErr
	}

	unknown := false
	for _, s := range socks {
		if _, ok := p.owners[s.inode]; !ok {
			unknown = true
			break
		}
	}
	if unknown || p.owners == nil || now.Sub(p.scanned) >= ownerRescan {
		inodes := make(map[uint64]bool, len(socks))
		for _, s := range socks {
			inodes[s.inode] = true
		}
		p.owners = scanOwners(filepath.Join(p.root, "proc"), inodes)
		p.scanned = now
	} else {
		// Forget sockets that are gone.
		live := make(map[uint64]bool, len(socks))
		for _, s := range socks {
			live[s.inode] = true
		}
		maps.DeleteFunc(p.owners, func(ino uint64, _ owner) bool { return !live[ino] })
	}

	out := make([]agentproto.ListeningPort, 0, len(socks))
	for _, s := range socks {
		o := p.owners[s.inode]
		out = append(out, agentproto.ListeningPort{Protocol: s.proto, Address: s.addr.String(), Port: s.port, Process: o.name, PID: o.pid})
	}
	return sortPorts(out), nil
}

// sortPorts sorts by protocol, port and address, and keeps one entry per
// socket address (several sockets share one with SO_REUSEPORT, or one
// socket several processes after fork): the one with the lowest known PID.
func sortPorts(ps []agentproto.ListeningPort) []agentproto.ListeningPort {
	slices.SortFunc(ps, func(a, b agentproto.ListeningPort) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port),
			cmp.Compare(a.Address, b.Address), cmp.Compare(pidKey(a.PID), pidKey(b.PID)))
	})
	return slices.CompactFunc(ps, func(a, b agentproto.ListeningPort) bool {
		return a.Protocol == b.Protocol && a.Port == b.Port && a.Address == b.Address
	})
}

// pidKey orders unknown owners (0) last.
func pidKey(pid int) int {
	if pid == 0 {
		return int(^uint(0) >> 1)
	}
	return pid
}

// scanOwners finds the processes holding the socket inodes wanted, by
// reading the /proc/PID/fd links ("socket:[INODE]") of every process in
// ascending PID order, so that a socket shared by several processes (a
// pre-forking server) is attributed to the lowest PID, usually its parent.
// Processes whose fds cannot be read are skipped. Every wanted inode is in
// the result; those not found have pid 0.
func scanOwners(proc string, wanted map[uint64]bool) map[uint64]owner {
	out := make(map[uint64]owner, len(wanted))
	for ino := range wanted {
		out[ino] = owner{}
	}
	d, err := os.Open(proc)
	if err != nil {
		return out
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	left := len(wanted)
	for _, pid := range pids {
		if left == 0 {
			break
		}
		dir := filepath.Join(proc, strconv.Itoa(pid), "fd")
		fd, err := os.Open(dir)
		if err != nil {
			continue
		}
		fds, _ := fd.Readdirnames(-1)
		fd.Close()
		name := ""
		for _, n := range fds {
			link, err := os.Readlink(dir + "/" + n)
			if err != nil {
				continue
			}
			rest, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
			if err != nil || !wanted[ino] || out[ino].pid != 0 {
				continue
			}
			if name == "" {
				name = processName(proc, pid)
			}
			out[ino] = owner{pid: pid, name: name}
			left--
		}
	}
	return out
}

// processName is the command name of a process (/proc/PID/comm).
func processName(proc string, pid int) string {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

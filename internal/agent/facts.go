package agent

import (
	"bufio"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Files the host facts are read from.
var (
	osReleasePaths = []string{"/etc/os-release", "/usr/lib/os-release"}
	kernelPath     = "/proc/sys/kernel/osrelease"
	meminfoPath    = "/proc/meminfo"
)

// CollectFacts describes this host. Facts that cannot be read are left
// empty; collecting never fails.
func CollectFacts(version string) agentproto.Facts {
	f := agentproto.Facts{
		Arch:             runtime.GOARCH,
		CPUCount:         runtime.NumCPU(),
		AgentVersion:     version,
		PublicAddresses:  []string{},
		PrivateAddresses: []string{},
		Capabilities:     []string{agentproto.CapabilityStorageGrants, agentproto.CapabilityBuildSecrets, agentproto.CapabilityDockerHousekeeping},
		Protocol:         agentproto.ProtocolVersion,
	}
	f.Hostname, _ = os.Hostname()
	for _, p := range osReleasePaths {
		if file, err := os.Open(p); err == nil {
			kv := parseOSRelease(file)
			file.Close()
			f.OS, f.OSVersion = kv["ID"], kv["VERSION_ID"]
			break
		}
	}
	if b, err := os.ReadFile(kernelPath); err == nil {
		f.Kernel = strings.TrimSpace(string(b))
	}
	if file, err := os.Open(meminfoPath); err == nil {
		f.MemoryBytes = parseMemTotal(file)
		file.Close()
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		f.PublicAddresses, f.PrivateAddresses = splitAddrs(addrs)
	}
	return f
}

// parseOSRelease reads os-release(5): KEY=value lines, values optionally
// quoted with shell-style escapes.
func parseOSRelease(r io.Reader) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		kv[strings.TrimSpace(k)] = unquoteShell(strings.TrimSpace(v))
	}
	return kv
}

func unquoteShell(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		q := v[0]
		v = v[1 : len(v)-1]
		if q == '\'' {
			return v
		}
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			if v[i] == '\\' && i+1 < len(v) && strings.IndexByte("\\$\"`", v[i+1]) >= 0 {
				i++
			}
			b.WriteByte(v[i])
		}
		return b.String()
	}
	return v
}

// parseMemTotal returns MemTotal of /proc/meminfo in bytes, 0 if absent.
func parseMemTotal(r io.Reader) uint64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0
		}
		if len(fields) > 1 && strings.EqualFold(fields[1], "kB") {
			n *= 1024
		}
		return n
	}
	return 0
}

// sharedAddressSpace is 100.64.0.0/10 (RFC 6598, carrier-grade NAT and
// overlay networks such as Tailscale): not globally routable, though
// net.IP.IsPrivate says false.
var sharedAddressSpace = &net.IPNet{IP: net.IPv4(100, 64, 0, 0), Mask: net.CIDRMask(10, 32)}

// splitAddrs sorts interface addresses into public (globally routable) and
// private ones; loopback, link-local, multicast and unspecified addresses
// are skipped. Both results are sorted and free of duplicates.
func splitAddrs(addrs []net.Addr) (public, private []string) {
	public, private = []string{}, []string{}
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		switch {
		case ip == nil, ip.IsLoopback(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(),
			ip.IsInterfaceLocalMulticast(), ip.IsMulticast(), ip.IsUnspecified():
			continue
		case ip.IsPrivate(), sharedAddressSpace.Contains(ip):
			private = append(private, ip.String())
		case ip.IsGlobalUnicast():
			public = append(public, ip.String())
		}
	}
	slices.Sort(public)
	slices.Sort(private)
	return slices.Compact(public), slices.Compact(private)
}

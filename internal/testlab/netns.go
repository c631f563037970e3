package testlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netnsPrefix starts the name of every network namespace a test makes; the
// process id follows, so that namespaces left by a test process that was
// killed are recognised and removed by the next one.
const netnsPrefix = "capstan-test-"

// netnsPool is the range the links between a test's namespaces take their
// addresses from: a private range that nothing else on a test machine uses,
// a /30 per link.
var netnsPool = netip.MustParsePrefix("10.213.0.0/16")

// NetNS is a network namespace made for one test, linked to the test's own
// namespace by a veth pair with a private /30: HostAddr on the test's end,
// NSAddr on the namespace's. A process started with Command runs in the
// namespace and reaches nothing but its own loopback and HostAddr; a
// server of the test that should be reachable from it listens on
// HostAddr. Cut and Restore take the link down and up, as a network
// partition would. It needs root and the ip command (iproute2).
type NetNS struct {
	Name     string
	HostAddr netip.Addr
	NSAddr   netip.Addr
	hostDev  string
	nsDev    string
	t        testing.TB
}

// NewNetNS makes a network namespace with its veth link, and removes both
// when the test ends, whether it passed or failed. Without root or the ip
// command the test is skipped, or fails when CI=true.
func NewNetNS(t testing.TB) *NetNS {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		Require(t, "the ip command (iproute2; scripts/testenv.sh installs it)")
	}
	if os.Geteuid() != 0 {
		Require(t, "root, to make network namespaces")
	}
	removeStaleNetNS(t)
	var tok [3]byte
	if _, err := rand.Read(tok[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(tok[:])
	n := &NetNS{Name: fmt.Sprintf("%s%d-%s", netnsPrefix, os.Getpid(), id), hostDev: "cst" + id + "h", nsDev: "cst" + id + "n", t: t}
	n.ip(t, "netns", "add", n.Name)
	// Registered before anything else is made in it, so a failure half
	// way still removes what was made.
	t.Cleanup(func() {
		// Deleting the host end deletes its peer; the namespace goes
		// once no process is left in it.
		ipQuiet("link", "del", n.hostDev)
		if out, err := ipQuiet("netns", "del", n.Name); err != nil {
			t.Errorf("removing network namespace %s: %v: %s", n.Name, err, out)
		}
	})
	n.ip(t, "link", "add", n.hostDev, "type", "veth", "peer", "name", n.nsDev, "netns", n.Name)
	n.HostAddr, n.NSAddr = freeLinkAddrs(t)
	n.ip(t, "addr", "add", n.HostAddr.String()+"/30", "dev", n.hostDev)
	n.ip(t, "link", "set", n.hostDev, "up")
	n.ip(t, "-n", n.Name, "addr", "add", n.NSAddr.String()+"/30", "dev", n.nsDev)
	n.ip(t, "-n", n.Name, "link", "set", "lo", "up")
	n.ip(t, "-n", n.Name, "link", "set", n.nsDev, "up")
	Eventually(t, 30*time.Second, "the namespace reaches "+n.HostAddr.String(), n.reachable)
	return n
}

// Command returns a command that runs name with args in the namespace (ip
// netns exec, which execs it: the process is name's).
func (n *NetNS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Cut takes the namespace's end of the link down: nothing in the namespace
// reaches the test's end any more (new connections fail, open ones hang)
// until Restore.
func (n *NetNS) Cut(t testing.TB) {
	t.Helper()
	n.ip(t, "-n", n.Name, "link", "set", n.nsDev, "down")
	Eventually(t, 30*time.Second, "the namespace is cut off", func() bool { return !n.reachable() })
}

// Restore brings the link back up after Cut.
func (n *NetNS) Restore(t testing.TB) {
	t.Helper()
	n.ip(t, "-n", n.Name, "link", "set", n.nsDev, "up")
	Eventually(t, 30*time.Second, "the namespace reaches "+n.HostAddr.String()+" again", n.reachable)
}

// reachable reports whether the namespace has a route to HostAddr (the
// link is up and its address in place).
func (n *NetNS) reachable() bool {
	out, err := ipQuiet("-n", n.Name, "-4", "route", "get", n.HostAddr.String())
	return err == nil && strings.Contains(out, "dev "+n.nsDev)
}

func (n *NetNS) ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := ipQuiet(args...); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func ipQuiet(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return string(out), err
}

// freeLinkAddrs picks a /30 of netnsPool that no interface of the test's
// namespace has an address in, and returns its two host addresses.
func freeLinkAddrs(t testing.TB) (host, ns netip.Addr) {
	t.Helper()
	out, err := ipQuiet("-4", "-o", "addr", "show")
	if err != nil {
		t.Fatalf("ip addr show: %v: %s", err, out)
	}
	used := map[netip.Prefix]bool{}
	for _, f := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(f); err == nil && netnsPool.Contains(p.Addr()) {
			used[netip.PrefixFrom(p.Addr(), 30).Masked()] = true
		}
	}
	base := netnsPool.Addr().As4()
	var r [2]byte
	for range 64 {
		if _, err := rand.Read(r[:]); err != nil {
			t.Fatal(err)
		}
		a := base
		a[2], a[3] = r[0], r[1]&^3
		p := netip.PrefixFrom(netip.AddrFrom4(a), 30)
		if used[p] {
			continue
		}
		return p.Addr().Next(), p.Addr().Next().Next()
	}
	t.Fatalf("no free /30 in %s", netnsPool)
	return
}

// removeStaleNetNS removes the namespaces (and their links) of test
// processes that are gone: a test killed before its cleanup ran.
func removeStaleNetNS(t testing.TB) {
	t.Helper()
	out, err := ipQuiet("netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix) {
			continue
		}
		rest := strings.TrimPrefix(f[0], netnsPrefix)
		pidText, id, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil || syscall.Kill(pid, 0) == syscall.EPERM {
			continue
		}
		ipQuiet("link", "del", "cst"+id+"h")
		if out, err := ipQuiet("netns", "del", f[0]); err != nil {
			t.Logf("removing the stale network namespace %s: %v: %s", f[0], err, out)
		}
	}
}

// Package testlab runs the real components Capstan's tests need, on this
// machine and for one test at a time: a Docker engine and images built
// locally from Go programs, a Caddy with its admin API and local CA, a
// systemd host booted with systemd-nspawn, and a fresh PostgreSQL
// database. Every test in the module gets its components here, and waits
// for them with Eventually, never for an amount of time.
//
// What it offers, one file per component:
//
//   - testlab.go: Require (a missing component skips the test, or fails it
//     when CI=true), Eventually and EventuallyReport (a condition with a
//     deadline), FreePort, Tail.
//   - clock.go: Clock, a time source the test moves by hand.
//   - docker.go: Docker (a client of the engine under test, DockerHost,
//     DockerEnv for an agent's environment),
//     GoProgram (a static Linux build of a Go main package), BuildImage and
//     ProgramImage (FROM scratch images, legacy builder, no registry),
//     CreateContainer.
//   - caddy.go: StartCaddy (its own process, directories and ports on
//     127.0.0.1), its root and intermediate certificates, and clients that
//     reach its sites by name.
//   - nspawn.go: DebianRootfs (a debootstrap tree, cached between runs),
//     BootHost (systemd as PID 1 on a tmpfs overlay of that tree, sharing
//     the host's network), Host.Exec through nsenter, and Host.RunInstaller.
//   - engineimages.go: EngineImage (local images of PostgreSQL 15,
//     MariaDB 10.11 and Redis 7 from Debian's packages that honour the
//     official images' environment and volumes, built once per machine
//     and cached) and StartEngine (a container of one on its own network
//     and volume, its port on 127.0.0.1).
//   - postgres.go: PostgresURL and PostgresDatabase (a new database per
//     test on the server named by CAPSTAN_TEST_POSTGRES_URL).
//   - engines.go: external database engines from Debian's packages, each
//     a process of its own on a loopback port: StartPostgresServer (a
//     cluster with password authentication, for TLS and login tests),
//     StartMariaDB (with MariaDB.Database, a new database per test),
//     StartRedis; each may serve TLS with a certificate from NewTestCA.
//   - githost.go: StartGitHost, a stand-in for GitHub's app pages and REST
//     API over HTTPS on 127.0.0.1 (its CA in a file for SSL_CERT_FILE):
//     manifest conversion, app JWTs checked against the key it issued,
//     installations, expiring installation tokens, paginated repositories
//     and branches, commits.
//   - receiver.go: StartReceiver, an HTTPS server on 127.0.0.1 (its CA in a
//     file for SSL_CERT_FILE) that records every request and answers as
//     the test says: a stand-in for webhook and chat endpoints.
//   - smtp.go: StartSMTPServer, a real SMTP server on 127.0.0.1 (go-smtp)
//     with STARTTLS and PLAIN authentication that keeps what it accepts.
//   - browser.go: Chromium (Debian's, for playwright-core) and
//     ConsoleScripts (node and the web console's installed packages), for
//     the console's browser tests.
//   - netns.go: NewNetNS (a network namespace linked to the test's own by
//     a veth pair with private addresses, commands run in it, and Cut and
//     Restore of the link: a network partition).
//   - loopfs.go: LoopFilesystem (a small real ext4 filesystem, loop-mounted,
//     that agents report like any disk, for tests that fill it).
//
// Adding a component (a database engine, an S3 or SMTP peer): put it in a
// file named after it, with a Start or New function that takes testing.TB,
// finds its binary or skips through Require, listens on 127.0.0.1 ports
// from FreePort or :0, keeps its files under t.TempDir(), waits for it to
// be ready with a deadline, and stops it in t.Cleanup (logging its output
// when the test failed). Say in the list above what it offers. If
// scripts/testenv.sh must install or start something for it, add that
// there too.
//
// testlab is for tests only. It is an ordinary package so that tests of
// several packages can share it, but only test files and test helper
// packages (named ...test) may import it; TestOnlyTestsImportTestlab
// enforces that no binary links it.
package testlab

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// InCI reports whether a missing component fails a test rather than
// skipping it (CI=true: CI must run every test).
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test because a component is missing, or fails it
// when CI=true. what says what is missing and how to get it.
func Require(t testing.TB, what string) {
	t.Helper()
	if InCI() {
		t.Fatalf("missing test component: %s; CI=true, so this is a failure rather than a skip", what)
	}
	t.Skipf("missing test component: %s", what)
}

// Poll intervals of Eventually: the first checks come quickly, later ones
// less often, so that a long wait does not load a busy machine.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// Eventually polls cond until it returns true, failing the test with what
// if that takes longer than timeout. Choose timeout for a slow, loaded
// machine: it is only waited out when something is wrong.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyReport(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// EventuallyReport is Eventually for a condition that also describes the
// state it saw; the last description is in the failure message.
func EventuallyReport(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := firstPoll
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				t.Fatalf("%s: not within %s; last: %s", what, timeout, state)
			}
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that is free now, for a
// program that must be told its port before it starts (Caddy's sites).
// Prefer listening on :0 wherever the program can report the port it got.
//
// The port is drawn at random from below the kernel's ephemeral range:
// ports from :0 and the source ports of outgoing connections come from
// that range, so a port handed out here is not taken by them in the
// moment between the probe and its use. The same port is never handed
// out twice in one test process.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	const first = 10000
	for range 200 {
		port := first + rand.IntN(low-first)
		ports.Lock()
		taken := ports.given[port]
		ports.given[port] = true
		ports.Unlock()
		if taken {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free TCP port on 127.0.0.1 between %d and %d", first, low)
	return 0
}

// ports holds the ports FreePort handed out in this process.
var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				return n
			}
		}
	}
	return 32768
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

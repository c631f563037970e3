package testlab

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// External database engines from Debian's packages, each its own process
// on a loopback port with its files in a directory of its own: a
// PostgreSQL cluster (for what the shared server of PostgresURL cannot
// do: TLS, password authentication), a MariaDB server and a Redis server.
// TestCA makes the certificates their TLS tests need.

// TestCA is a certificate authority made by a test.
type TestCA struct {
	// PEM is the CA's certificate.
	PEM  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewTestCA makes a CA.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "Capstan test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &TestCA{PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), cert: cert, key: key}
}

// Leaf issues a server certificate for hosts (names or IP addresses) and
// returns it and its key in PEM.
func (ca *TestCA) Leaf(t testing.TB, hosts ...string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// EngineTLS is the certificate an engine serves; nil serves no TLS.
type EngineTLS struct {
	CA      *TestCA
	CertPEM string
	KeyPEM  string
}

// ServerTLS issues a certificate of ca for 127.0.0.1 and localhost.
func ServerTLS(t testing.TB, ca *TestCA) *EngineTLS {
	cert, key := ca.Leaf(t, "127.0.0.1", "localhost")
	return &EngineTLS{CA: ca, CertPEM: cert, KeyPEM: key}
}

// engineDir makes a directory owned by the system user account, which
// the engine runs as, and removes it when the test ends. It is not under
// t.TempDir: the account must reach it.
func engineDir(t testing.TB, account string) string {
	t.Helper()
	if _, err := user.Lookup(account); err != nil {
		Require(t, fmt.Sprintf("the %s system user (install the engine's Debian package)", account))
	}
	dir, err := os.MkdirTemp("", "capstan-"+account+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chownTo(t, account, dir)
	return dir
}

// writeOwned writes a file the account owns.
func writeOwned(t testing.TB, account, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	chownTo(t, account, path)
}

// mkdirOwned makes the directory path, owned by the system user account.
func mkdirOwned(t testing.TB, account, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	chownTo(t, account, path)
}

func chownTo(t testing.TB, account, path string) {
	t.Helper()
	u, err := user.Lookup(account)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// startEngine starts cmd with its output in log and stops it with
// SIGTERM when the test ends (the log's tail is shown when it failed).
func startEngine(t testing.TB, cmd *exec.Cmd, log string) {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s log:\n%s", filepath.Base(cmd.Path), Tail(string(b), 40))
		}
	})
}

// waitForConnections waits until the engine at dsn (of the database/sql
// driver) answers a ping.
func waitForConnections(t testing.TB, engine, driver, dsn string) {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	EventuallyReport(t, time.Minute, engine+" accepts connections", func() (bool, string) {
		err := db.Ping()
		return err == nil, fmt.Sprint(err)
	})
}

// engineBinary finds an engine's binary or requires its Debian package.
func engineBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Require(t, fmt.Sprintf("%s (apt-get install %s, or run the tests with make test)", name, pkg))
	}
	return p
}

// PostgresServer is a PostgreSQL cluster of one test, with password
// (scram-sha-256) authentication on 127.0.0.1.
type PostgresServer struct {
	Port int
	// User and Password are the superuser's.
	User, Password string
}

// URL is the superuser's URL of database, without TLS.
func (s *PostgresServer) URL(database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(s.User, s.Password), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)),
		Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// postgresBin is the newest installed PostgreSQL's bin directory.
func postgresBin(t testing.TB) string {
	t.Helper()
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		Require(t, "PostgreSQL server binaries (apt-get install postgresql)")
	}
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi < vj
	})
	return filepath.Dir(found[len(found)-1])
}

// StartPostgresServer initialises and starts a PostgreSQL cluster for
// the test, serving tls when it is not nil (plain connections are
// accepted too).
func StartPostgresServer(t testing.TB, tls *EngineTLS) *PostgresServer {
	t.Helper()
	bin := postgresBin(t)
	dir := engineDir(t, "postgres")
	s := &PostgresServer{Port: FreePort(t), User: "postgres", Password: "pw-" + randomHex(8)}
	writeOwned(t, "postgres", filepath.Join(dir, "pwfile"), s.Password+"\n", 0o600)
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := RunCommand(t, ctx, exec.CommandContext(ctx, "runuser", "-u", "postgres", "--", filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "--pwfile", filepath.Join(dir, "pwfile"), "-A", "scram-sha-256", "-E", "UTF8",
		"--locale=C.UTF-8", "--no-sync"), "initdb")
	if res.ExitCode != 0 {
		t.Fatalf("initdb: exit %d: %s", res.ExitCode, res.Stderr)
	}
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nfsync = off\n", s.Port, dir)
	if tls != nil {
		writeOwned(t, "postgres", filepath.Join(dir, "server.crt"), tls.CertPEM, 0o644)
		writeOwned(t, "postgres", filepath.Join(dir, "server.key"), tls.KeyPEM, 0o600)
		conf += fmt.Sprintf("ssl = on\nssl_cert_file = '%s/server.crt'\nssl_key_file = '%s/server.key'\n", dir, dir)
	}
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\n" + conf)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	writeOwned(t, "postgres", filepath.Join(data, "pg_hba.conf"), "local all all scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n", 0o600)
	cmd := exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "postgres"), "-D", data)
	startEngine(t, cmd, filepath.Join(dir, "postgres.log"))
	waitForConnections(t, "PostgreSQL", "pgx", s.URL("postgres"))
	return s
}

// MariaDB is a MariaDB server of one test.
type MariaDB struct {
	Port int
	// User and Password are an account with every privilege, from any
	// host, with the grant option.
	User, Password string
}

// DSN is the account's data source name for database ("" for none).
func (m *MariaDB) DSN(database string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = m.User, m.Password, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)), database
	return cfg.FormatDSN()
}

// StartMariaDB initialises and starts a MariaDB server for the test,
// serving tls when it is not nil (plain connections are accepted too).
func StartMariaDB(t testing.TB, tls *EngineTLS) *MariaDB {
	t.Helper()
	installDB := engineBinary(t, "mariadb-install-db", "mariadb-server")
	server := "/usr/sbin/mariadbd"
	if _, err := os.Stat(server); err != nil {
		server = engineBinary(t, "mariadbd", "mariadb-server")
	}
	dir := engineDir(t, "mysql")
	m := &MariaDB{Port: FreePort(t), User: "capstan_admin", Password: "pw-" + randomHex(8)}
	data := filepath.Join(dir, "data")
	// A temporary directory of its own: a MariaDB server deletes every
	// temporary table it finds in its tmpdir as it starts, those of
	// another instance's bootstrap running at the same time included.
	tmp := filepath.Join(dir, "tmp")
	mkdirOwned(t, "mysql", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := RunCommand(t, ctx, exec.CommandContext(ctx, installDB, "--no-defaults", "--user=mysql", "--datadir="+data,
		"--skip-test-db", "--auth-root-authentication-method=socket", "--tmpdir="+tmp), "mariadb-install-db")
	if res.ExitCode != 0 {
		t.Fatalf("mariadb-install-db: exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// The account is made by the server itself as it starts.
	writeOwned(t, "mysql", filepath.Join(dir, "init.sql"), fmt.Sprintf(
		"CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s';\nGRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION;\n",
		m.User, m.Password, m.User), 0o600)
	args := []string{"--no-defaults", "--user=mysql", "--datadir=" + data, "--tmpdir=" + tmp, "--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(m.Port), "--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--init-file=" + filepath.Join(dir, "init.sql"), "--skip-name-resolve", "--innodb-buffer-pool-size=32M", "--skip-log-bin"}
	if tls != nil {
		writeOwned(t, "mysql", filepath.Join(dir, "ca.pem"), tls.CA.PEM, 0o644)
		writeOwned(t, "mysql", filepath.Join(dir, "server.crt"), tls.CertPEM, 0o644)
		writeOwned(t, "mysql", filepath.Join(dir, "server.key"), tls.KeyPEM, 0o600)
		args = append(args, "--ssl-ca="+filepath.Join(dir, "ca.pem"), "--ssl-cert="+filepath.Join(dir, "server.crt"), "--ssl-key="+filepath.Join(dir, "server.key"))
	}
	startEngine(t, exec.Command(server, args...), filepath.Join(dir, "mariadb.log"))
	waitForConnections(t, "MariaDB", "mysql", m.DSN(""))
	return m
}

// Database creates a new, empty database on the server and returns its
// name.
func (m *MariaDB) Database(t testing.TB) string {
	t.Helper()
	name := "capstan_test_" + randomHex(8)
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	return name
}

// Redis is a Redis server of one test, without persistence.
type Redis struct {
	Port int
	// Password is the default user's (requirepass).
	Password string
}

// StartRedis starts a Redis server for the test with a password for
// its default user; with tls it serves TLS only.
func StartRedis(t testing.TB, tls *EngineTLS) *Redis {
	t.Helper()
	bin := engineBinary(t, "redis-server", "redis-server")
	dir := engineDir(t, "redis")
	r := &Redis{Port: FreePort(t), Password: "pw-" + randomHex(8)}
	args := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--requirepass", r.Password}
	if tls == nil {
		args = append(args, "--port", strconv.Itoa(r.Port))
	} else {
		writeOwned(t, "redis", filepath.Join(dir, "ca.pem"), tls.CA.PEM, 0o644)
		writeOwned(t, "redis", filepath.Join(dir, "server.crt"), tls.CertPEM, 0o644)
		writeOwned(t, "redis", filepath.Join(dir, "server.key"), tls.KeyPEM, 0o600)
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(r.Port), "--tls-auth-clients", "no",
			"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-cert-file", filepath.Join(dir, "server.crt"),
			"--tls-key-file", filepath.Join(dir, "server.key"))
	}
	startEngine(t, exec.Command(bin, args...), filepath.Join(dir, "redis.log"))
	EventuallyReport(t, time.Minute, "Redis accepts connections", func() (bool, string) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, fmt.Sprint(err)
	})
	return r
}

// Client is a client of the server as its default user (without TLS).
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)), Password: r.Password, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToLower(fmt.Sprintf("%x", b))
}

// OpenSQL opens dsn with driver (the test imports the driver), keeping no
// idle connection, so that a login dropped or a database renamed is seen
// by the next statement; it is closed when the test ends.
func OpenSQL(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0)
	t.Cleanup(func() { db.Close() })
	return db
}

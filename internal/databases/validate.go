package databases

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Limits and defaults of the inputs.
const (
	MaxNameLen     = 63
	MaxHostLen     = 253
	MaxUsernameLen = 128
	MaxPasswordLen = 1024
	// MaxDatabaseLen is the longest database name of any engine (MySQL and
	// MariaDB: 64; PostgreSQL: 63).
	MaxDatabaseLen = 64
	MaxCALen       = 64 << 10
	// MaxSQLLen bounds a query console statement.
	MaxSQLLen = 256 << 10

	DefaultMaxRows        = 100
	MinMaxRows            = 1
	MaxMaxRows            = 1000
	DefaultTimeoutSeconds = 30
	MinTimeoutSeconds     = 1
	MaxTimeoutSeconds     = 300

	// Key-value bounds.
	DefaultKVCount    = 100
	MaxKVCount        = 1000
	MaxKVDB           = 15
	MaxKVKeyLen       = 4096
	MaxKVDeleteKeys   = 1000
	DefaultKVMaxItems = 100
	MaxKVMaxItems     = 10000
	DefaultKVMaxBytes = 64 << 10
	MaxKVMaxBytes     = 512 << 10
)

// nameProblem says what is wrong with an instance name: a DNS label (1 to
// 63 lowercase letters, digits and '-', not at either end).
func nameProblem(n string) string {
	switch {
	case n == "":
		return "is required"
	case len(n) > MaxNameLen:
		return fmt.Sprintf("must be at most %d characters", MaxNameLen)
	case strings.HasPrefix(n, "-") || strings.HasSuffix(n, "-"):
		return "must not start or end with '-'"
	}
	for _, r := range n {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-') {
			return "only lowercase letters a-z, digits and '-'"
		}
	}
	return ""
}

// hostProblem says what is wrong with an instance's host: an IP address or
// a host name, without scheme, port or path.
func hostProblem(h string) string {
	switch {
	case h == "":
		return "is required"
	case len(h) > MaxHostLen:
		return fmt.Sprintf("must be at most %d characters", MaxHostLen)
	case net.ParseIP(h) != nil:
		return ""
	case strings.ContainsAny(h, ":/@?# "):
		return "must be a bare host name or IP address: no scheme, port, user or path"
	}
	for _, l := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if l == "" || len(l) > 63 {
			return "labels must be 1 to 63 characters"
		}
		for _, r := range l {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
				return fmt.Sprintf("label %q: only letters, digits, '-' and '_'", l)
			}
		}
	}
	return ""
}

// textProblem checks a free-text identifier sent to an engine as a
// connection parameter (user name, database name): bounded, no control
// characters. The engine decides what else is valid.
func textProblem(s string, maxLen int) string {
	if len(s) > maxLen {
		return fmt.Sprintf("must be at most %d bytes", maxLen)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "must not contain control characters"
	}
	return ""
}

// tlsProblem checks a TLS mode and CA bundle; the field errors name
// tls_mode and ca.
func tlsProblem(errs addFunc, mode, ca string) {
	switch mode {
	case agentproto.DBTLSDisable, agentproto.DBTLSRequire, agentproto.DBTLSVerifyCA, agentproto.DBTLSVerifyFull:
	case "":
		errs("tls_mode", "is required: disable, require, verify-ca or verify-full")
	default:
		errs("tls_mode", "must be disable, require, verify-ca or verify-full")
	}
	if ca == "" {
		return
	}
	if mode != agentproto.DBTLSVerifyCA && mode != agentproto.DBTLSVerifyFull {
		errs("ca", "applies only to verify-ca and verify-full")
		return
	}
	if len(ca) > MaxCALen {
		errs("ca", "must be at most %d bytes", MaxCALen)
		return
	}
	if p := caProblem(ca); p != "" {
		errs("ca", "%s", p)
	}
}

// caProblem says what is wrong with a PEM bundle of CA certificates.
func caProblem(ca string) string {
	rest := []byte(ca)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Sprintf("must hold only CERTIFICATE blocks, not %s", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return "holds a certificate that does not parse"
		}
		n++
	}
	if n == 0 {
		return "must be PEM: one or more -----BEGIN CERTIFICATE----- blocks"
	}
	if strings.TrimSpace(string(rest)) != "" {
		return "has text after its last certificate"
	}
	return ""
}

type addFunc func(field, format string, args ...any)

package console_test

import (
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// tlsCase is a connection attempt in one TLS mode.
type tlsCase struct {
	name, host, mode, ca string
	// wantTLS is whether the connection uses TLS; refused, that it fails
	// with an error containing it; fails, that it fails at all.
	wantTLS bool
	refused string
	fails   bool
}

// tlsCases are the TLS modes against a server whose certificate, from
// ca, names localhost only: verify-ca passes for 127.0.0.1 where
// verify-full does not, and another CA fails both.
func tlsCases(ca, other *testlab.TestCA, plainOK bool) []tlsCase {
	cases := []tlsCase{
		{name: "require", host: "127.0.0.1", mode: agentproto.DBTLSRequire, wantTLS: true},
		{name: "verify-ca", host: "127.0.0.1", mode: agentproto.DBTLSVerifyCA, ca: ca.PEM, wantTLS: true},
		{name: "verify-full", host: "localhost", mode: agentproto.DBTLSVerifyFull, ca: ca.PEM, wantTLS: true},
		{name: "verify-full wrong name", host: "127.0.0.1", mode: agentproto.DBTLSVerifyFull, ca: ca.PEM, refused: "127.0.0.1"},
		{name: "verify-ca wrong CA", host: "127.0.0.1", mode: agentproto.DBTLSVerifyCA, ca: other.PEM, refused: "certificate signed by unknown authority"},
		{name: "verify-full wrong CA", host: "localhost", mode: agentproto.DBTLSVerifyFull, ca: other.PEM, refused: "certificate signed by unknown authority"},
	}
	if plainOK {
		cases = append(cases, tlsCase{name: "disable", host: "127.0.0.1", mode: agentproto.DBTLSDisable})
	}
	return cases
}

func runTLSCases(t *testing.T, target agentproto.DBTarget, password string, cases []tlsCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := target
			tg.Host, tg.TLSMode, tg.CA = c.host, c.mode, c.ca
			o := runJob(t, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: tg}, password)
			if c.fails {
				o.Failure(t)
				return
			}
			if c.refused != "" {
				if e := o.Failure(t); !strings.Contains(e.Message, c.refused) {
					t.Errorf("refused with %q, want it to say %q", e.Message, c.refused)
				}
				return
			}
			var res agentproto.DBConnectResult
			o.OK(t, &res)
			if res.TLS != c.wantTLS || res.ServerVersion == "" {
				t.Errorf("connect = %+v, want tls %t", res, c.wantTLS)
			}
		})
	}
}

// localhostTLS is a certificate of ca for localhost only.
func localhostTLS(t *testing.T, ca *testlab.TestCA) *testlab.EngineTLS {
	cert, key := ca.Leaf(t, "localhost")
	return &testlab.EngineTLS{CA: ca, CertPEM: cert, KeyPEM: key}
}

func TestPostgresTLSModes(t *testing.T) {
	ca, other := testlab.NewTestCA(t), testlab.NewTestCA(t)
	s := testlab.StartPostgresServer(t, localhostTLS(t, ca))
	target := agentproto.DBTarget{Engine: agentproto.EnginePostgres, Port: s.Port, Username: s.User, Database: "postgres"}
	runTLSCases(t, target, s.Password, tlsCases(ca, other, true))
	target.Host = "127.0.0.1"
	if e := runJob(t, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: target}, "wrong").Failure(t); e.Code != "28P01" ||
		!strings.Contains(e.Message, "password authentication failed") {
		t.Errorf("wrong password: %+v, want the engine's 28P01", e)
	}
}

func TestRedisTLSModes(t *testing.T) {
	ca, other := testlab.NewTestCA(t), testlab.NewTestCA(t)
	r := testlab.StartRedis(t, localhostTLS(t, ca))
	target := agentproto.DBTarget{Engine: agentproto.EngineRedis, Port: r.Port, Username: "default"}
	// The server speaks only TLS: a plain connection fails.
	runTLSCases(t, target, r.Password, append(tlsCases(ca, other, false),
		tlsCase{name: "disable", host: "127.0.0.1", mode: agentproto.DBTLSDisable, fails: true}))
}

func TestMariaDBTLSModes(t *testing.T) {
	ca, other := testlab.NewTestCA(t), testlab.NewTestCA(t)
	m := testlab.StartMariaDB(t, localhostTLS(t, ca))
	target := agentproto.DBTarget{Engine: agentproto.EngineMariaDB, Port: m.Port, Username: m.User}
	runTLSCases(t, target, m.Password, tlsCases(ca, other, true))
}

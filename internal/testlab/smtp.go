package testlab

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Mail is one message an SMTPServer accepted.
type Mail struct {
	From string
	To   []string
	Data []byte
	// TLS is true when the message came over a connection upgraded with
	// STARTTLS.
	TLS bool
	// User is who authenticated ("" when nobody did).
	User string
}

// SMTPServer is a real SMTP server on 127.0.0.1 (go-smtp) that offers
// STARTTLS with a certificate of a CA of the test (written to CAFile for
// SSL_CERT_FILE), requires PLAIN authentication with User and Password
// after STARTTLS, and keeps every message it accepts.
type SMTPServer struct {
	Host     string // 127.0.0.1
	Port     int
	CAFile   string
	User     string
	Password string

	mu      sync.Mutex // guards mails and refused
	mails   []Mail
	refused map[string]bool
}

// Refuse makes the server refuse mail to the address from now on, as a
// server does a mailbox it does not know (550 at RCPT TO).
func (s *SMTPServer) Refuse(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = map[string]bool{}
	}
	s.refused[addr] = true
}

// StartSMTPServer starts an SMTP server, stopped when the test ends.
func StartSMTPServer(t testing.TB) *SMTPServer {
	t.Helper()
	hs := newHTTPSStandIn(t, "smtp")
	ln := hs.ln
	s := &SMTPServer{Host: "127.0.0.1", CAFile: hs.CAFile, User: "capstan", Password: "smtp-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	s.Port = ln.Addr().(*net.TCPAddr).Port
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &smtpSession{srv: s, conn: c}, nil }))
	srv.Domain = "localhost"
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{hs.cert}}
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, time.Minute
	srv.MaxMessageBytes = 10 << 20
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return s
}

// Mails returns the messages accepted so far, oldest first.
func (s *SMTPServer) Mails() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.mails...)
}

type smtpSession struct {
	srv  *SMTPServer
	conn *smtp.Conn
	user string
	mail Mail
}

var errSMTPAuth = &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "authentication failed"}

func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, password string) error {
		if user != s.srv.User || password != s.srv.Password {
			return errSMTPAuth
		}
		s.user = user
		return nil
	}), nil
}

func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.user == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	_, tlsOn := s.conn.TLSConnectionState()
	s.mail = Mail{From: from, TLS: tlsOn, User: s.user}
	return nil
}

func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.srv.mu.Lock()
	refused := s.srv.refused[to]
	s.srv.mu.Unlock()
	if refused {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}
	}
	s.mail.To = append(s.mail.To, to)
	return nil
}

func (s *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(s.mail.To) == 0 {
		return errors.New("no recipients")
	}
	s.mail.Data = b
	s.srv.mu.Lock()
	s.srv.mails = append(s.srv.mails, s.mail)
	s.srv.mu.Unlock()
	return nil
}

func (s *smtpSession) Reset()        { s.mail = Mail{} }
func (s *smtpSession) Logout() error { return nil }

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/notify"
)

// smtpFlags are the e-mail settings of serve and notify test-email.
type smtpFlags struct {
	SMTPHost         string `name:"smtp-host" env:"CAPSTAN_SMTP_HOST" help:"SMTP server that sends the control plane's e-mail. Empty: no e-mail."`
	SMTPPort         int    `name:"smtp-port" env:"CAPSTAN_SMTP_PORT" default:"587" help:"SMTP server port."`
	SMTPSecurity     string `name:"smtp-security" env:"CAPSTAN_SMTP_SECURITY" default:"starttls" enum:"starttls,tls,none" help:"starttls (required STARTTLS), tls (implicit TLS, usually port 465) or none (a relay on a trusted network)."`
	SMTPUser         string `name:"smtp-user" env:"CAPSTAN_SMTP_USER" help:"SMTP user name; empty: no authentication."`
	SMTPPasswordFile string `name:"smtp-password-file" env:"CAPSTAN_SMTP_PASSWORD_FILE" help:"File holding the SMTP password; or give it in CAPSTAN_SMTP_PASSWORD."`
	SMTPFrom         string `name:"smtp-from" env:"CAPSTAN_SMTP_FROM" help:"From address of the control plane's e-mail."`
}

// smtp returns the settings; the password comes from CAPSTAN_SMTP_PASSWORD
// or the password file, never from a flag.
func (f smtpFlags) smtp(publicURL string) (notify.SMTP, error) {
	s := notify.SMTP{Host: f.SMTPHost, Port: f.SMTPPort, Security: f.SMTPSecurity, User: f.SMTPUser, From: f.SMTPFrom,
		Password: os.Getenv("CAPSTAN_SMTP_PASSWORD"), PublicURL: publicURL}
	if f.SMTPPasswordFile != "" {
		b, err := os.ReadFile(f.SMTPPasswordFile)
		if err != nil {
			return notify.SMTP{}, fmt.Errorf("--smtp-password-file: %w", err)
		}
		s.Password = strings.TrimRight(string(b), "\r\n")
	}
	return s, s.Check()
}

type notifyCmd struct {
	TestEmail testEmailCmd `cmd:"" name:"test-email" help:"Send a test e-mail with the SMTP settings (the same flags and CAPSTAN_SMTP_* variables as serve)."`
}

type testEmailCmd struct {
	smtpFlags
	To string `required:"" help:"Recipient address."`
}

func (c *testEmailCmd) Run(ctx context.Context) error {
	s, err := c.smtp("")
	if err != nil {
		return err
	}
	if !s.Enabled() {
		return errors.New("no SMTP server: give --smtp-host (or CAPSTAN_SMTP_HOST)")
	}
	ctx, cancel := context.WithTimeout(ctx, notify.MailTimeout+5*time.Second)
	defer cancel()
	body := "This is a test e-mail from Capstan: the SMTP settings work.\n"
	if err := s.Send(ctx, c.To, "[Capstan] Test e-mail", body, "<p>This is a test e-mail from Capstan: the SMTP settings work.</p>\n"); err != nil {
		return err
	}
	fmt.Printf("sent a test e-mail to %s through %s:%d\n", c.To, s.Host, s.Port)
	return nil
}

package notify

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	netmail "net/mail"
	"slices"
	"strings"
	"time"

	mail "github.com/wneessen/go-mail"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
)

// SMTP security modes.
const (
	SMTPStartTLS = "starttls" // plain connection upgraded with STARTTLS (required)
	SMTPTLS      = "tls"      // TLS from the first byte (implicit TLS, port 465)
	SMTPNone     = "none"     // no TLS: only to a relay on a trusted network
)

// SMTP is how the control plane sends e-mail. Host empty means no e-mail.
type SMTP struct {
	Host     string
	Port     int
	Security string // SMTPStartTLS, SMTPTLS or SMTPNone
	User     string
	Password string // never logged
	From     string
	// PublicURL is the control plane's URL; links in mails go to the web
	// console under it.
	PublicURL string
}

// Enabled reports whether e-mail is configured.
func (s SMTP) Enabled() bool { return s.Host != "" }

// Check validates the settings.
func (s SMTP) Check() error {
	if !s.Enabled() {
		return nil
	}
	switch {
	case s.Port < 1 || s.Port > 65535:
		return errors.New("--smtp-port must be 1 to 65535")
	case !slices.Contains([]string{SMTPStartTLS, SMTPTLS, SMTPNone}, s.Security):
		return errors.New("--smtp-security must be starttls, tls or none")
	case s.From == "" || !strings.Contains(s.From, "@"):
		return errors.New("--smtp-from must be an e-mail address")
	case s.User != "" && s.Password == "":
		return errors.New("--smtp-user needs a password (CAPSTAN_SMTP_PASSWORD or --smtp-password-file)")
	}
	return nil
}

// MailTimeout bounds sending one mail.
const MailTimeout = 30 * time.Second

// Send sends one mail with a plain text and an HTML body.
func (s SMTP) Send(ctx context.Context, to, subject, text, htmlBody string) error {
	m := mail.NewMsg()
	if err := m.From(s.From); err != nil {
		return fmt.Errorf("from address: %w", err)
	}
	if err := m.To(to); err != nil {
		return fmt.Errorf("recipient address: %w", err)
	}
	m.Subject(subject)
	m.SetBodyString(mail.TypeTextPlain, text)
	m.AddAlternativeString(mail.TypeTextHTML, htmlBody)
	// The connection ends with ctx (shutdown, the attempt's deadline),
	// even while the server keeps quiet.
	// (go-mail's dial context ends with the dial: the send's is used.)
	dial := func(dialCtx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(dialCtx, network, addr)
		if err != nil {
			return nil, err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		return &stopConn{Conn: c, stop: stop}, nil
	}
	opts := []mail.Option{mail.WithPort(s.Port), mail.WithTimeout(MailTimeout), mail.WithDialContextFunc(dial)}
	switch s.Security {
	case SMTPTLS:
		opts = append(opts, mail.WithSSL())
	case SMTPNone:
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	default:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory))
	}
	if s.User != "" {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthAutoDiscover), mail.WithUsername(s.User), mail.WithPassword(s.Password))
	}
	c, err := mail.NewClient(s.Host, opts...)
	if err != nil {
		return err
	}
	if err := c.DialAndSendWithContext(ctx, m); err != nil {
		return fmt.Errorf("smtp %s:%d: %s", s.Host, s.Port, strings.ReplaceAll(err.Error(), s.Password, "…"))
	}
	return nil
}

// stopConn is a connection that forgets its closing hook once closed.
type stopConn struct {
	net.Conn
	stop func() bool
}

func (c *stopConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// Settings are a user's e-mail preferences.
type Settings struct {
	EmailDeploySuccess bool `json:"email_deploy_success" doc:"Mail me when a deployment succeeds (default false)"`
	EmailDeployFailure bool `json:"email_deploy_failure" doc:"Mail me when a deployment fails (default true)"`
	EmailAlerts        bool `json:"email_alerts" doc:"Mail me when an alert opens or resolves (default true)"`
}

// DefaultSettings are the preferences of a user who never set any.
var DefaultSettings = Settings{EmailDeploySuccess: false, EmailDeployFailure: true, EmailAlerts: true}

// SettingsStore persists e-mail preferences.
type SettingsStore interface {
	// NotificationSettings returns each user's preferences; users who set
	// none are absent.
	NotificationSettings(ctx context.Context) (map[string]Settings, error)
	PutNotificationSettings(ctx context.Context, userID string, s Settings, now time.Time) error
}

// Email is the destination that mails users the events their preferences
// ask for.
type Email struct {
	smtp     SMTP
	settings SettingsStore
	users    Users
}

// NewEmail returns the e-mail destination.
func NewEmail(s SMTP, st SettingsStore, users Users) *Email {
	return &Email{smtp: s, settings: st, users: users}
}

// Kind implements events.Destination.
func (*Email) Kind() string { return "email" }

func wants(s Settings, t events.Type) bool {
	switch t {
	case events.DeploySucceeded:
		return s.EmailDeploySuccess
	case events.DeployFailed:
		return s.EmailDeployFailure
	case events.AlertOpened, events.AlertResolved:
		return s.EmailAlerts
	}
	return false
}

// Route names the active users whose preferences ask for ev.
func (e *Email) Route(ctx context.Context, ev events.Event) ([]string, error) {
	if !e.smtp.Enabled() || !wants(Settings{true, true, true}, ev.Type) {
		return nil, nil
	}
	users, err := e.users.ListUsers(ctx)
	if err != nil {
		return nil, err
	}
	prefs, err := e.settings.NotificationSettings(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range users {
		p, ok := prefs[u.ID]
		if !ok {
			p = DefaultSettings
		}
		if !u.Disabled && wants(p, ev.Type) {
			out = append(out, u.ID)
		}
	}
	return out, nil
}

// Deliver mails ev to a user. A failing SMTP server fails the attempt,
// which is retried; the action that published ev never waits for it.
func (e *Email) Deliver(ctx context.Context, userID string, d events.Delivery, ev events.Event) (events.Result, error) {
	users, err := e.users.ListUsers(ctx)
	if err != nil {
		return events.Result{}, err
	}
	i := slices.IndexFunc(users, func(u auth.User) bool { return u.ID == userID })
	if i < 0 || users[i].Disabled {
		return events.Result{}, fmt.Errorf("user %s: %w", userID, events.ErrGone)
	}
	m := Describe(ev, users[i].Admin)
	link := strings.TrimRight(e.smtp.PublicURL, "/") + m.Link
	text := m.Body + "\n\n" + link + "\n\n-- \nCapstan. Change what you are mailed in your notification settings.\n"
	htmlBody := "<p>" + html.EscapeString(m.Body) + "</p>\n<p><a href=\"" + html.EscapeString(link) + "\">" + html.EscapeString(link) +
		"</a></p>\n<p style=\"color:#666\">Capstan. Change what you are mailed in your notification settings.</p>\n"
	return events.Result{}, e.smtp.Send(ctx, users[i].Email, "[Capstan] "+m.Title, text, htmlBody)
}

// Preferences reads and changes users' e-mail preferences.
type Preferences struct {
	store SettingsStore
	now   func() time.Time
}

// NewPreferences returns the preferences service.
func NewPreferences(st SettingsStore, now func() time.Time) *Preferences {
	return &Preferences{store: st, now: now}
}

// Get returns a user's preferences.
func (p *Preferences) Get(ctx context.Context, userID string) (Settings, error) {
	all, err := p.store.NotificationSettings(ctx)
	if err != nil {
		return Settings{}, err
	}
	if s, ok := all[userID]; ok {
		return s, nil
	}
	return DefaultSettings, nil
}

// Put replaces a user's preferences.
func (p *Preferences) Put(ctx context.Context, userID string, s Settings) (Settings, error) {
	return s, p.store.PutNotificationSettings(ctx, userID, s, p.now().UTC())
}

// SMTPSettings is what the API shows of the SMTP settings: never the
// password, only whether one is set.
type SMTPSettings struct {
	Enabled     bool   `json:"enabled" doc:"false: no SMTP server is set (--smtp-host) and no e-mail goes out"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Security    string `json:"security" doc:"starttls, tls or none; empty when not enabled"`
	User        string `json:"user" doc:"SMTP user name; empty: no authentication"`
	PasswordSet bool   `json:"password_set" doc:"Whether a password is set (CAPSTAN_SMTP_PASSWORD or --smtp-password-file)"`
	From        string `json:"from" doc:"From address of the control plane's e-mail"`
}

// Settings returns the settings to show.
func (s SMTP) Settings() SMTPSettings {
	if !s.Enabled() {
		return SMTPSettings{}
	}
	return SMTPSettings{Enabled: true, Host: s.Host, Port: s.Port, Security: s.Security, User: s.User,
		PasswordSet: s.Password != "", From: s.From}
}

// MailTestResult is what came of sending a test e-mail.
type MailTestResult struct {
	To         string `json:"to"`
	Delivered  bool   `json:"delivered" doc:"The SMTP server accepted the mail"`
	Error      string `json:"error,omitempty" doc:"Why it was not accepted: the connection's or the SMTP server's answer"`
	DurationMS int64  `json:"duration_ms"`
}

// Test sends a test e-mail to to at once (no retries) and says what came
// of it. fault.Conflict when no SMTP server is set; an address that is not
// one is a fault.Invalid.
func (s SMTP) Test(ctx context.Context, to string) (MailTestResult, error) {
	addr, err := netmail.ParseAddress(to)
	if err != nil || addr.Name != "" || len(to) > 254 {
		return MailTestResult{}, fault.Invalidf("to", "must be an e-mail address")
	}
	if !s.Enabled() {
		return MailTestResult{}, fault.Conflictf("email-not-configured", "No SMTP server is set: start the control plane with --smtp-host and the other --smtp-* settings.")
	}
	ctx, cancel := context.WithTimeout(ctx, MailTimeout)
	defer cancel()
	start := time.Now()
	body := "This is a test e-mail from Capstan: the SMTP settings work.\n"
	err = s.Send(ctx, addr.Address, "[Capstan] Test e-mail", body, "<p>This is a test e-mail from Capstan: the SMTP settings work.</p>\n")
	r := MailTestResult{To: addr.Address, Delivered: err == nil, DurationMS: time.Since(start).Milliseconds()}
	if err != nil {
		r.Error = err.Error()
	}
	return r, nil
}

// SendInvitation mails an invitation's link to the invitee at once (no
// retries): the administrator who invited waits for the answer.
func (s SMTP) SendInvitation(ctx context.Context, to, link, invitedBy string, admin bool, expires time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, MailTimeout)
	defer cancel()
	role := "a member"
	if admin {
		role = "an administrator"
	}
	by := "An administrator"
	if invitedBy != "" {
		by = invitedBy
	}
	intro := fmt.Sprintf("%s invited you to Capstan as %s. Open the link to choose a password and set up your authenticator app; "+
		"it works once, until %s.", by, role, expires.UTC().Format("2 January 2006 15:04 MST"))
	text := intro + "\n\n" + link + "\n\nIf you did not expect this, ignore this e-mail.\n"
	htmlBody := "<p>" + html.EscapeString(intro) + "</p>\n<p><a href=\"" + html.EscapeString(link) + "\">Accept the invitation</a></p>\n" +
		"<p style=\"color:#666\">If you did not expect this, ignore this e-mail.</p>\n"
	return s.Send(ctx, to, "[Capstan] You are invited", text, htmlBody)
}

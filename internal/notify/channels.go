package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/secrets"
)

// Channel kinds.
const (
	TeamChat  = "team_chat" // a Slack-compatible incoming webhook
	Messenger = "messenger" // a Telegram-compatible bot API
	Webhook   = "webhook"   // any HTTPS endpoint, signed per Standard Webhooks
)

// ChannelIDPrefix starts every channel id.
const ChannelIDPrefix = "chn"

// DefaultMessengerAPI is the bot API a messenger channel uses unless its
// config names another (a self-hosted Bot API server).
const DefaultMessengerAPI = "https://api.telegram.org"

// Audit actions of channels.
const (
	ActionChannelCreated = "notification.channel.created"
	ActionChannelUpdated = "notification.channel.updated"
	ActionChannelDeleted = "notification.channel.deleted"
	ActionSecretRotated  = "notification.channel.secret_rotated"
)

// ChannelConfig is a channel's destination. It is stored sealed and never
// returned.
type ChannelConfig struct {
	URL        string `json:"url,omitempty" maxLength:"2048" doc:"team_chat: the incoming-webhook URL; webhook: the HTTPS endpoint"`
	BotToken   string `json:"bot_token,omitempty" maxLength:"256" doc:"messenger: the bot's token"`
	ChatID     string `json:"chat_id,omitempty" maxLength:"128" doc:"messenger: the chat to post to"`
	APIBaseURL string `json:"api_base_url,omitempty" maxLength:"2048" doc:"messenger: the bot API's base URL; default https://api.telegram.org"`
}

// fields names the fields that are set.
func (c ChannelConfig) fields() []string {
	var out []string
	for _, f := range []struct {
		name, v string
	}{{"url", c.URL}, {"bot_token", c.BotToken}, {"chat_id", c.ChatID}, {"api_base_url", c.APIBaseURL}} {
		if f.v != "" {
			out = append(out, f.name)
		}
	}
	return out
}

func httpsURL(errs *fault.Fields, field, v string) {
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || strings.ContainsAny(v, " \t\r\n") {
		errs.Add(field, "must be an absolute https:// URL without credentials")
	}
}

// validate checks the config of a kind.
func (c ChannelConfig) validate(kind string) error {
	var errs fault.Fields
	switch kind {
	case TeamChat, Webhook:
		httpsURL(&errs, "config.url", c.URL)
		if c.BotToken != "" || c.ChatID != "" || c.APIBaseURL != "" {
			errs.Add("config", "%s takes url only", kind)
		}
	case Messenger:
		if c.BotToken == "" || len(c.BotToken) > 256 || strings.ContainsAny(c.BotToken, "/?# \t\r\n") {
			errs.Add("config.bot_token", "is required (up to 256 characters, no /, ?, # or spaces)")
		}
		if c.ChatID == "" || len(c.ChatID) > 128 {
			errs.Add("config.chat_id", "is required (up to 128 characters)")
		}
		if c.APIBaseURL != "" {
			httpsURL(&errs, "config.api_base_url", c.APIBaseURL)
		}
		if c.URL != "" {
			errs.Add("config.url", "messenger takes bot_token, chat_id and api_base_url")
		}
	}
	return errs.Err()
}

// Channel is a notification channel as shown: its config never is.
type Channel struct {
	ID           string   `json:"id" doc:"Channel id (chn_…)"`
	Kind         string   `json:"kind" enum:"team_chat,messenger,webhook"`
	Name         string   `json:"name"`
	Events       []string `json:"events" doc:"The event types the channel receives"`
	Enabled      bool     `json:"enabled"`
	ConfigFields []string `json:"config_set" doc:"Which config fields are set (their values are never returned)"`
	// PreviousSecretExpiresAt is set while a rotated-out signing secret
	// still signs.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty" doc:"webhook: until when the secret before the last rotation signs too"`
	CreatedBy               string     `json:"created_by,omitempty"`
	CreatedAt               time.Time  `json:"created_at"`
	UpdatedAt               time.Time  `json:"updated_at"`
}

// StoredChannel is a channel with its sealed config and secrets.
type StoredChannel struct {
	Channel
	Config, Secret, PreviousSecret string // sealed; "" when none
}

// ChannelStore persists channels.
type ChannelStore interface {
	InsertChannel(ctx context.Context, c StoredChannel) error
	Channels(ctx context.Context) ([]StoredChannel, error)
	Channel(ctx context.Context, id string) (StoredChannel, error)
	// UpdateChannel stores c if it was not changed since prev (a conflict
	// otherwise).
	UpdateChannel(ctx context.Context, c StoredChannel, prev time.Time) error
	DeleteChannel(ctx context.Context, id string) error
	Deliveries(ctx context.Context, destination string, limit int) ([]events.Delivery, error)
}

// NewChannel is what creating a channel takes.
type NewChannel struct {
	Kind    string        `json:"kind" enum:"team_chat,messenger,webhook" doc:"team_chat, messenger or webhook"`
	Name    string        `json:"name" maxLength:"100"`
	Config  ChannelConfig `json:"config"`
	Events  []string      `json:"events" maxItems:"64" doc:"Event types from the catalogue (see GET /api/v1/events)"`
	Enabled *bool         `json:"enabled,omitempty" doc:"Default true"`
}

// ChannelPatch changes a channel; nil fields stay.
type ChannelPatch struct {
	Name    *string        `json:"name,omitempty" maxLength:"100"`
	Events  []string       `json:"events,omitempty" maxItems:"64"`
	Enabled *bool          `json:"enabled,omitempty"`
	Config  *ChannelConfig `json:"config,omitempty" doc:"A new destination, replacing the whole config"`
	// RotateSecret gives a webhook a new signing secret; the old one
	// signs too for GraceSeconds.
	RotateSecret bool `json:"rotate_secret,omitempty" doc:"webhook: make a new signing secret (returned once); the old one keeps signing for grace_seconds"`
	GraceSeconds *int `json:"grace_seconds,omitempty" doc:"Seconds the old secret keeps signing after a rotation: 0 to 604800; default 86400"`
}

// Channels manages notification channels and delivers events to them.
type Channels struct {
	store ChannelStore
	key   *secrets.Key
	audit *audit.Log
	hc    *http.Client // guarded: see Guard
	now   func() time.Time
	log   *slog.Logger
}

// SendTimeout bounds one send.
const SendTimeout = 15 * time.Second

// NewChannels returns the channel service; guard decides which addresses
// deliveries may reach.
func NewChannels(st ChannelStore, key *secrets.Key, log *audit.Log, guard Guard, now func() time.Time, logger *slog.Logger) *Channels {
	if logger == nil {
		logger = slog.Default()
	}
	return &Channels{store: st, key: key, audit: log, hc: guard.Client(SendTimeout), now: now, log: logger}
}

func sealContext(id, what string) string { return "notification_channel:" + id + ":" + what }

func validEvents(list []string) error {
	var errs fault.Fields
	if len(list) == 0 {
		errs.Add("events", "name at least one event type")
	}
	seen := map[string]bool{}
	for i, e := range list {
		if !events.Known(events.Type(e)) {
			errs.Add(fmt.Sprintf("events[%d]", i), "unknown event type %q; the catalogue has %s", e, strings.Join(events.Types(), ", "))
		} else if seen[e] {
			errs.Add(fmt.Sprintf("events[%d]", i), "is a duplicate")
		}
		seen[e] = true
	}
	return errs.Err()
}

func validName(name string) error {
	if n := utf8.RuneCountInString(name); n < 1 || n > 100 || strings.ContainsFunc(name, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return fault.Invalidf("name", "must be 1 to 100 characters without control characters")
	}
	return nil
}

// newSecret makes a Standard Webhooks signing secret: whsec_ and 24
// random bytes in base64.
func newSecret() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:])
}

// Create validates and stores a channel. A webhook's signing secret is in
// the answer, and never again.
func (s *Channels) Create(ctx context.Context, c audit.Caller, n NewChannel) (Channel, string, error) {
	var errs fault.Fields
	if !slices.Contains([]string{TeamChat, Messenger, Webhook}, n.Kind) {
		errs.Add("kind", "must be team_chat, messenger or webhook")
	}
	if err := errs.Err(); err != nil {
		return Channel{}, "", err
	}
	if err := validName(n.Name); err != nil {
		return Channel{}, "", err
	}
	if err := validEvents(n.Events); err != nil {
		return Channel{}, "", err
	}
	if err := n.Config.validate(n.Kind); err != nil {
		return Channel{}, "", err
	}
	now := s.now().UTC()
	ch := StoredChannel{Channel: Channel{ID: ids.NewAt(ChannelIDPrefix, now), Kind: n.Kind, Name: n.Name, Events: n.Events, Enabled: true,
		ConfigFields: n.Config.fields(), CreatedBy: c.Actor.ID, CreatedAt: now, UpdatedAt: now}}
	if n.Enabled != nil {
		ch.Enabled = *n.Enabled
	}
	raw, err := json.Marshal(n.Config)
	if err != nil {
		return Channel{}, "", err
	}
	ch.Config = s.key.Seal(sealContext(ch.ID, "config"), raw)
	var secret string
	if n.Kind == Webhook {
		secret = newSecret()
		ch.Secret = s.key.Seal(sealContext(ch.ID, "secret"), []byte(secret))
	}
	if err := s.store.InsertChannel(ctx, ch); err != nil {
		return Channel{}, "", err
	}
	return ch.Channel, secret, s.audit.Record(ctx, c, ActionChannelCreated, audit.Target{Type: "notification_channel", ID: ch.ID}, map[string]any{"kind": ch.Kind, "name": ch.Name, "events": ch.Events})
}

// List returns every channel.
func (s *Channels) List(ctx context.Context) ([]Channel, error) {
	list, err := s.store.Channels(ctx)
	out := make([]Channel, len(list))
	for i, c := range list {
		out[i] = c.Channel
	}
	return out, err
}

// ChannelDetail is a channel with its latest deliveries.
type ChannelDetail struct {
	Channel
	Deliveries []events.Delivery `json:"deliveries" doc:"The latest 50 deliveries, newest first: status, attempts, response code and last error"`
}

// Get returns a channel with its latest deliveries.
func (s *Channels) Get(ctx context.Context, id string) (ChannelDetail, error) {
	c, err := s.store.Channel(ctx, id)
	if err != nil {
		return ChannelDetail{}, err
	}
	d, err := s.store.Deliveries(ctx, "channel:"+id, 50)
	if d == nil {
		d = []events.Delivery{}
	}
	return ChannelDetail{Channel: c.Channel, Deliveries: d}, err
}

// Update changes a channel; a rotation's new secret is in the answer, and
// never again.
func (s *Channels) Update(ctx context.Context, c audit.Caller, id string, p ChannelPatch) (Channel, string, error) {
	cur, err := s.store.Channel(ctx, id)
	if err != nil {
		return Channel{}, "", err
	}
	ch, now := cur, s.now().UTC()
	details := map[string]any{}
	if p.Name != nil {
		if err := validName(*p.Name); err != nil {
			return Channel{}, "", err
		}
		ch.Name, details["name"] = *p.Name, *p.Name
	}
	if p.Events != nil {
		if err := validEvents(p.Events); err != nil {
			return Channel{}, "", err
		}
		ch.Events, details["events"] = p.Events, p.Events
	}
	if p.Enabled != nil {
		ch.Enabled, details["enabled"] = *p.Enabled, *p.Enabled
	}
	if p.Config != nil {
		if err := p.Config.validate(ch.Kind); err != nil {
			return Channel{}, "", err
		}
		raw, err := json.Marshal(p.Config)
		if err != nil {
			return Channel{}, "", err
		}
		ch.Config, ch.ConfigFields, details["config"] = s.key.Seal(sealContext(ch.ID, "config"), raw), p.Config.fields(), "replaced"
	}
	var secret string
	if p.RotateSecret {
		if ch.Kind != Webhook {
			return Channel{}, "", fault.Invalidf("rotate_secret", "only a webhook channel has a signing secret")
		}
		grace := 86400
		if p.GraceSeconds != nil {
			grace = *p.GraceSeconds
		}
		if grace < 0 || grace > 7*86400 {
			return Channel{}, "", fault.Invalidf("grace_seconds", "must be 0 to 604800")
		}
		old, err := s.key.Open(sealContext(ch.ID, "secret"), cur.Secret)
		if err != nil {
			return Channel{}, "", err
		}
		secret = newSecret()
		ch.Secret = s.key.Seal(sealContext(ch.ID, "secret"), []byte(secret))
		ch.PreviousSecret = s.key.Seal(sealContext(ch.ID, "previous_secret"), old)
		until := now.Add(time.Duration(grace) * time.Second)
		ch.PreviousSecretExpiresAt = &until
		details["secret"], details["grace_seconds"] = "rotated", grace
	} else if p.GraceSeconds != nil {
		return Channel{}, "", fault.Invalidf("grace_seconds", "goes with rotate_secret")
	}
	ch.UpdatedAt = now
	if err := s.store.UpdateChannel(ctx, ch, cur.UpdatedAt); err != nil {
		return Channel{}, "", err
	}
	action := ActionChannelUpdated
	if p.RotateSecret {
		action = ActionSecretRotated
	}
	return ch.Channel, secret, s.audit.Record(ctx, c, action, audit.Target{Type: "notification_channel", ID: id}, details)
}

// Delete deletes a channel; its pending deliveries fail.
func (s *Channels) Delete(ctx context.Context, c audit.Caller, id string) error {
	if err := s.store.DeleteChannel(ctx, id); err != nil {
		return err
	}
	return s.audit.Record(ctx, c, ActionChannelDeleted, audit.Target{Type: "notification_channel", ID: id}, nil)
}

// Kind implements events.Destination.
func (*Channels) Kind() string { return "channel" }

// Route names the enabled channels that take ev.
func (s *Channels) Route(ctx context.Context, ev events.Event) ([]string, error) {
	list, err := s.store.Channels(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list {
		if c.Enabled && slices.Contains(c.Events, string(ev.Type)) {
			out = append(out, c.ID)
		}
	}
	return out, nil
}

// Deliver sends ev to a channel. A channel deleted or disabled since is
// gone: the delivery fails without retries.
func (s *Channels) Deliver(ctx context.Context, id string, d events.Delivery, ev events.Event) (events.Result, error) {
	c, err := s.store.Channel(ctx, id)
	if fault.Is(err, fault.NotFound) {
		return events.Result{}, fmt.Errorf("channel %s: %w", id, events.ErrGone)
	}
	if err != nil {
		return events.Result{}, err
	}
	if !c.Enabled {
		return events.Result{}, fmt.Errorf("channel %s is disabled: %w", id, events.ErrGone)
	}
	return s.send(ctx, c, d.ID, ev)
}

// ChannelTestResult is what a test message came to.
type ChannelTestResult struct {
	Delivered    bool   `json:"delivered"`
	ResponseCode int    `json:"response_code,omitempty" doc:"HTTP status the destination answered; absent when none came"`
	Error        string `json:"error,omitempty" doc:"Why it was not delivered"`
	DurationMS   int64  `json:"duration_ms"`
}

// Test sends a test message to a channel now.
func (s *Channels) Test(ctx context.Context, id string) (ChannelTestResult, error) {
	c, err := s.store.Channel(ctx, id)
	if err != nil {
		return ChannelTestResult{}, err
	}
	now := s.now().UTC()
	ev := events.Event{ID: ids.NewAt(events.IDPrefix, now), Type: "channel.test", Subject: events.Subject{Type: "notification_channel", ID: id},
		Payload: json.RawMessage(`{"message":"A test message from Capstan."}`), OccurredAt: now}
	start := time.Now()
	res, err := s.send(ctx, c, ids.NewAt(events.DeliveryIDPrefix, now), ev)
	out := ChannelTestResult{Delivered: err == nil, ResponseCode: res.Code, DurationMS: time.Since(start).Milliseconds()}
	if err != nil {
		out.Error = err.Error()
	}
	return out, nil
}

// send makes one request to the channel's destination.
func (s *Channels) send(ctx context.Context, c StoredChannel, msgID string, ev events.Event) (events.Result, error) {
	raw, err := s.key.Open(sealContext(c.ID, "config"), c.Config)
	if err != nil {
		return events.Result{}, err
	}
	var cfg ChannelConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return events.Result{}, err
	}
	m := Describe(ev, true)
	if ev.Type == "channel.test" {
		m = Message{Title: "Capstan test message", Body: "This channel works: " + c.Name + "."}
	}
	var target string
	var body []byte
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"Capstan"}}
	switch c.Kind {
	case TeamChat:
		target = cfg.URL
		body, err = json.Marshal(map[string]any{"text": m.Title + "\n" + m.Body, "blocks": []any{
			map[string]any{"type": "header", "text": map[string]any{"type": "plain_text", "text": truncateRunes(m.Title, 150)}},
			map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": m.Body}},
		}})
	case Messenger:
		base := cfg.APIBaseURL
		if base == "" {
			base = DefaultMessengerAPI
		}
		target = strings.TrimRight(base, "/") + "/bot" + cfg.BotToken + "/sendMessage"
		body, err = json.Marshal(map[string]any{"chat_id": cfg.ChatID, "text": m.Title + "\n" + m.Body, "disable_web_page_preview": true})
	case Webhook:
		target = cfg.URL
		body, err = json.Marshal(map[string]any{"type": ev.Type, "timestamp": ev.OccurredAt.UTC().Format(time.RFC3339Nano),
			"data": map[string]any{"event_id": ev.ID, "subject": ev.Subject, "payload": ev.Payload, "title": m.Title, "body": m.Body, "link": m.Link}})
		if err != nil {
			return events.Result{}, err
		}
		ts := strconv.FormatInt(s.now().Unix(), 10)
		sigs, err := s.signatures(c, msgID, ts, body)
		if err != nil {
			return events.Result{}, err
		}
		header.Set("webhook-id", msgID)
		header.Set("webhook-timestamp", ts)
		header.Set("webhook-signature", strings.Join(sigs, " "))
	default:
		return events.Result{}, fmt.Errorf("unknown channel kind %q", c.Kind)
	}
	if err != nil {
		return events.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return events.Result{}, fmt.Errorf("the channel's destination is not a valid URL")
	}
	req.Header = header
	resp, err := s.hc.Do(req)
	if err != nil {
		return events.Result{}, fmt.Errorf("%s", cleanError(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return events.Result{Code: resp.StatusCode}, fmt.Errorf("the destination answered HTTP %d", resp.StatusCode)
	}
	return events.Result{Code: resp.StatusCode}, nil
}

// signatures signs a webhook message with the channel's secret, and with
// the previous one while it is in its grace period.
func (s *Channels) signatures(c StoredChannel, msgID, ts string, body []byte) ([]string, error) {
	secretsToUse := []struct{ what, sealed string }{{"secret", c.Secret}}
	if c.PreviousSecret != "" && c.PreviousSecretExpiresAt != nil && s.now().Before(*c.PreviousSecretExpiresAt) {
		secretsToUse = append(secretsToUse, struct{ what, sealed string }{"previous_secret", c.PreviousSecret})
	}
	var out []string
	for _, sc := range secretsToUse {
		raw, err := s.key.Open(sealContext(c.ID, sc.what), sc.sealed)
		if err != nil {
			return nil, err
		}
		out = append(out, Sign(string(raw), msgID, ts, body))
	}
	return out, nil
}

// Sign is the Standard Webhooks signature of a message: "v1," and the
// base64 HMAC-SHA256 of "id.timestamp.body" keyed with the secret's bytes
// (the base64 after "whsec_").
func Sign(secret, msgID, ts string, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		key = []byte(secret)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + ts + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

package githost

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
)

// Webhooks: the provider signs each delivery's body with the app's webhook
// secret (X-Hub-Signature-256: sha256=HMAC-SHA256 in hex). The signature
// is checked, in constant time, before anything of the body is parsed.
// The signature covers the body alone, not the headers: X-GitHub-Delivery
// can be changed at will on a captured delivery, so a delivery is handled
// once per body (its SHA-256), whatever its delivery id. A push to a
// branch deploys that exact commit to the applications that follow the
// branch with auto_deploy, unless it is older than what they deploy
// already (see PushHandler); installation events keep the installations
// current.

// Limits of webhooks.
const (
	// MaxWebhookBody bounds a delivery's body (GitHub caps payloads at
	// 25 MB; pushes are far smaller).
	MaxWebhookBody = 25 << 20
	// DeliveryMemory is how long deliveries are remembered: the provider
	// redelivers within days, not weeks. A push older than that sent
	// again is still refused by the push handler if its commit is older
	// than the one deployed.
	DeliveryMemory = 30 * 24 * time.Hour
)

// Webhook outcomes.
const (
	WebhookDuplicate = "duplicate" // a delivery of the same body was handled before
	WebhookIgnored   = "ignored"   // nothing to do with it
	WebhookHandled   = "handled"   // it changed something
	WebhookSkipped   = "skipped"   // a push that applications follow, none of which deployed it (see Skipped)
)

// Push is a push event, as applications need it.
type Push struct {
	InstallationID int64
	RepoID         int64
	Repository     string
	Branch         string
	CommitSHA      string
}

// SkippedDeploy is an application that follows a pushed branch and did
// not deploy the push.
type SkippedDeploy struct {
	ApplicationID string `json:"application_id"`
	Reason        string `json:"reason" doc:"Why the push was not deployed, e.g. its commit is older than the application's latest deployment's"`
}

// PushOutcome is what a push did.
type PushOutcome struct {
	DeploymentIDs []string        // deployments queued
	Skipped       []SkippedDeploy // applications that did not deploy it
}

// PushHandler queues the deploys a push asks for and says what it did.
// An error fails the delivery, which the provider may then redeliver.
type PushHandler func(ctx context.Context, p Push) (PushOutcome, error)

// OnPush registers what pushes do.
func (s *Service) OnPush(h PushHandler) { s.push = h }

// WebhookResult is the answer to a delivery.
type WebhookResult struct {
	Delivery      string          `json:"delivery"`
	Event         string          `json:"event"`
	Result        string          `json:"result" enum:"duplicate,ignored,handled,skipped"`
	DeploymentIDs []string        `json:"deployment_ids" doc:"Deployments a push queued"`
	Skipped       []SkippedDeploy `json:"skipped" doc:"Applications that follow the pushed branch and did not deploy the push, and why"`
}

// Delivery is one webhook delivery as received.
type Delivery struct {
	Event     string // X-GitHub-Event
	ID        string // X-GitHub-Delivery: not signed, only logged and echoed
	Signature string // X-Hub-Signature-256
	Body      []byte
}

// Verified is a delivery whose signature matched its body.
type Verified struct {
	d      Delivery
	digest string // hex SHA-256 of the body
}

func errSignature() error {
	return fault.Unauthenticatedf("invalid-signature", "The delivery's X-Hub-Signature-256 does not match its body.")
}

// verify checks the signature of body with secret in constant time.
func verify(secret []byte, signature string, body []byte) bool {
	hexSig, ok := strings.CutPrefix(signature, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// HandleWebhook verifies and handles one delivery.
func (s *Service) HandleWebhook(ctx context.Context, d Delivery) (WebhookResult, error) {
	v, err := s.VerifyWebhook(ctx, d)
	if err != nil {
		return WebhookResult{}, err
	}
	return s.HandleVerified(ctx, v)
}

// VerifyWebhook checks a delivery's signature (fault Unauthenticated
// "invalid-signature" when it does not match, or no app is connected) and
// its headers.
func (s *Service) VerifyWebhook(ctx context.Context, d Delivery) (Verified, error) {
	secret, err := s.WebhookSecret(ctx)
	if fault.Is(err, fault.Conflict) {
		return Verified{}, errSignature() // nothing to verify it with
	}
	if err != nil {
		return Verified{}, err
	}
	if !verify(secret, d.Signature, d.Body) {
		s.log.WarnContext(ctx, "webhook delivery with a bad signature refused", "event", d.Event, "delivery", d.ID)
		return Verified{}, errSignature()
	}
	if d.ID == "" || d.Event == "" {
		return Verified{}, fault.Invalidf("X-GitHub-Delivery", "X-GitHub-Delivery and X-GitHub-Event are required")
	}
	sum := sha256.Sum256(d.Body)
	return Verified{d: d, digest: hex.EncodeToString(sum[:])}, nil
}

// HandleVerified handles a verified delivery, once per body: a delivery
// whose body was handled before is a duplicate, whatever its delivery id,
// and so is one fired while the first is being handled.
func (s *Service) HandleVerified(ctx context.Context, v Verified) (WebhookResult, error) {
	d := v.d
	res := WebhookResult{Delivery: d.ID, Event: d.Event, Result: WebhookIgnored, DeploymentIDs: []string{}, Skipped: []SkippedDeploy{}}
	now := s.now().UTC()
	first, err := s.store.RememberGitHostDelivery(ctx, v.digest, d.ID, d.Event, now, now.Add(-DeliveryMemory))
	if err != nil {
		return WebhookResult{}, err
	}
	if !first {
		s.log.InfoContext(ctx, "webhook delivery of a body handled before ignored", "event", d.Event, "delivery", d.ID, "body_sha256", v.digest)
		res.Result = WebhookDuplicate
		return res, nil
	}
	if err := s.handle(ctx, d, &res); err != nil {
		// Let a redelivery try again.
		if _, ferr := s.store.ForgetGitHostDelivery(context.WithoutCancel(ctx), v.digest); ferr != nil {
			s.log.ErrorContext(ctx, "forgetting a failed webhook delivery", "delivery", d.ID, "err", ferr.Error())
		}
		return WebhookResult{}, err
	}
	return res, nil
}

// event is the part of the deliveries' payloads this package reads.
type event struct {
	Action  string `json:"action"`
	Ref     string `json:"ref"`
	After   string `json:"after"`
	Deleted bool   `json:"deleted"`
	// Repository of a push.
	Repository *struct {
		ID       int64  `json:"id"`
		FullName string `json:"full_name"`
	} `json:"repository"`
	Installation *struct {
		ID                  int64  `json:"id"`
		RepositorySelection string `json:"repository_selection"`
		Account             *struct {
			Login string `json:"login"`
			Type  string `json:"type"`
		} `json:"account"`
		AppID int64 `json:"app_id"`
	} `json:"installation"`
	RepositorySelection string `json:"repository_selection"`
}

func (s *Service) handle(ctx context.Context, d Delivery, res *WebhookResult) error {
	var ev event
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return fault.Invalidf("body", "the delivery is not a JSON object")
	}
	switch d.Event {
	case "push":
		return s.handlePush(ctx, ev, res)
	case "installation", "installation_repositories":
		return s.handleInstallation(ctx, d.Event, ev, res)
	}
	return nil
}

func (s *Service) handlePush(ctx context.Context, ev event, res *WebhookResult) error {
	branch, ok := strings.CutPrefix(ev.Ref, "refs/heads/")
	if !ok || ev.Deleted || ev.Repository == nil || ev.Installation == nil || len(ev.After) != 40 ||
		strings.Trim(ev.After, "0") == "" || s.push == nil {
		return nil
	}
	out, err := s.push(ctx, Push{InstallationID: ev.Installation.ID, RepoID: ev.Repository.ID, Repository: ev.Repository.FullName,
		Branch: branch, CommitSHA: strings.ToLower(ev.After)})
	if err != nil {
		return err
	}
	if len(out.Skipped) > 0 {
		res.Result, res.Skipped = WebhookSkipped, out.Skipped
		for _, sk := range out.Skipped {
			s.log.WarnContext(ctx, "push not deployed", "delivery", res.Delivery, "application_id", sk.ApplicationID,
				"commit", ev.After, "reason", sk.Reason)
		}
	}
	if len(out.DeploymentIDs) > 0 {
		res.Result, res.DeploymentIDs = WebhookHandled, out.DeploymentIDs
	}
	return nil
}

func (s *Service) handleInstallation(ctx context.Context, name string, ev event, res *WebhookResult) error {
	in := ev.Installation
	if in == nil || in.ID < 1 {
		return nil
	}
	a, err := s.store.GitHostApp(ctx)
	if err != nil {
		return err
	}
	if in.AppID != 0 && in.AppID != a.AppID {
		return nil
	}

	target := audit.Target{Type: "githost_installation", ID: strconv.FormatInt(in.ID, 10)}
	if name == "installation" && ev.Action == "deleted" {
		if _, err := s.store.GitHostInstallation(ctx, in.ID); err != nil {
			return nil // not recorded
		}
		res.Result = WebhookHandled
		return s.forgetInstallation(ctx, in.ID, "webhook")
	}
	// created, new_permissions_accepted, suspend, unsuspend; added or
	// removed repositories: the installation as it is now.
	rec := Installation{ID: in.ID, RepositorySelection: in.RepositorySelection}
	if in.Account != nil {
		rec.Account, rec.AccountType = in.Account.Login, in.Account.Type
	}
	if ev.RepositorySelection != "" {
		rec.RepositorySelection = ev.RepositorySelection
	}
	if rec.Account == "" {
		old, err := s.store.GitHostInstallation(ctx, in.ID)
		if err != nil {
			return nil // an installation not recorded, without its account
		}
		rec.Account, rec.AccountType = old.Account, old.AccountType
	}
	if err := s.recordInstallation(ctx, rec); err != nil {
		return err
	}
	s.forgetTokens(in.ID) // its repositories may have changed
	res.Result = WebhookHandled
	return s.audit.Record(ctx, audit.System, ActionInstallationRecorded, target, map[string]any{"by": "webhook", "action": name + "." + ev.Action,
		"account": rec.Account, "repository_selection": rec.RepositorySelection})
}

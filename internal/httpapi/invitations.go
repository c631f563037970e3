package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/auth"
)

type inviteInput struct {
	Body struct {
		Email string `json:"email" minLength:"3" maxLength:"254" doc:"The invitee's e-mail address"`
		Admin bool   `json:"admin,omitempty" doc:"true: the invitee becomes an administrator; false (default): a member"`
	}
}

type inviteOutput struct {
	Body struct {
		Invitation auth.Invitation `json:"invitation"`
		Delivery   string          `json:"delivery" enum:"email,link" doc:"email: the link was mailed to the invitee; link: no SMTP server is set, hand the link over yourself"`
		Link       string          `json:"link,omitempty" doc:"The invitation link (delivery link only), shown in this answer only"`
	}
}

type invitationsOutput struct {
	Body struct {
		Invitations []auth.Invitation `json:"invitations"`
	}
}

type invitationTokenBody struct {
	Token string `json:"token" minLength:"1" maxLength:"128" doc:"The token of the invitation link (the part after #)"`
}

type invitationTokenInput struct {
	Body invitationTokenBody
}

type invitationLookupOutput struct {
	Body struct {
		Email     string    `json:"email"`
		Admin     bool      `json:"admin" doc:"The invitee becomes an administrator (true) or a member"`
		ExpiresAt time.Time `json:"expires_at"`
	}
}

type invitationEnrollmentOutput struct {
	Body struct {
		Email      string `json:"email"`
		TOTPSecret string `json:"totp_secret" doc:"The invitee's TOTP secret (base32), shown in this answer only"`
		TOTPURI    string `json:"totp_uri" doc:"otpauth:// URI of the secret; shown in this answer only"`
		TOTPQRCode string `json:"totp_qr_svg" doc:"The URI as a QR code, an SVG image for the authenticator app's camera; shown in this answer only"`
	}
}

type invitationAcceptInput struct {
	Body struct {
		Token    string `json:"token" minLength:"1" maxLength:"128" doc:"The token of the invitation link (the part after #)"`
		Password string `json:"password" minLength:"1" maxLength:"1024" doc:"12 to 128 characters, not a commonly used password, not the e-mail address"`
		Code     string `json:"code" pattern:"^[0-9]{6}$" doc:"Six-digit code the authenticator app shows for the secret of the enrollment"`
	}
}

// inviteLink is the console's page that accepts an invitation. The token
// is in the fragment, which browsers never send: it stays out of the logs
// of the control plane and of any proxy in front of it.
func (s *Server) inviteLink(token string) string {
	return strings.TrimRight(s.deps.PublicURL, "/") + "/invite#" + token
}

func (s *Server) registerInvitations() {
	tags := []string{"Users"}
	op(s, huma.Operation{
		OperationID: "invite-user", Method: http.MethodPost, Path: "/api/v1/users/invitations", Tags: tags,
		Summary: "Invite someone to become a user",
		Description: "Makes a one-time invitation link, valid 72 hours, for the address with the role given (a member by default). " +
			"When an SMTP server is set, the link is mailed to the invitee (`delivery: email`) and is not in the answer; if the SMTP " +
			"server refuses or cannot be reached, no invitation is made and the answer is 502 `email-failed` with its error: " +
			"fix the SMTP settings or invite again once it is back. Without an SMTP server the answer carries the link " +
			"(`delivery: link`), in this answer only: hand it to the invitee yourself. The token is in the link's fragment (after #), " +
			"which browsers do not send, so it stays out of server logs. 409 `email-taken` when the address is a user's, 409 " +
			"`invitation-pending` when it has a pending invitation (revoke it to invite again). Audited (`user.invited`).",
		DefaultStatus: http.StatusCreated, Errors: []int{http.StatusConflict, http.StatusBadGateway},
	}, Admin, func(ctx context.Context, in *inviteInput) (*inviteOutput, error) {
		c := caller(ctx)
		delivery, deliver := "link", auth.Deliver(nil)
		if smtp := s.deps.SMTP; smtp.Enabled() {
			delivery = "email"
			deliver = func(ctx context.Context, inv auth.Invitation, token string) error {
				return smtp.SendInvitation(ctx, inv.Email, s.inviteLink(token), inv.InvitedBy, inv.Admin, inv.ExpiresAt)
			}
		}
		inv, token, err := s.deps.Auth.Invite(ctx, c, in.Body.Email, in.Body.Admin, delivery, deliver)
		if err != nil {
			return nil, err
		}
		out := &inviteOutput{}
		out.Body.Invitation, out.Body.Delivery = inv, delivery
		if delivery == "link" {
			out.Body.Link = s.inviteLink(token)
		}
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "list-invitations", Method: http.MethodGet, Path: "/api/v1/users/invitations", Tags: tags,
		Summary: "Pending invitations, and those closed within 7 days",
		Description: "Newest first, without their tokens. `status` is pending, accepted (`user_id` is the user it became), revoked " +
			"or expired; accepted, revoked and expired ones are listed for 7 days after.",
	}, Admin, func(ctx context.Context, _ *struct{}) (*invitationsOutput, error) {
		list, err := s.deps.Auth.ListInvitations(ctx)
		if err != nil {
			return nil, err
		}
		out := &invitationsOutput{}
		out.Body.Invitations = list
		if out.Body.Invitations == nil {
			out.Body.Invitations = []auth.Invitation{}
		}
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "revoke-invitation", Method: http.MethodDelete, Path: "/api/v1/users/invitations/{id}", Tags: tags,
		Summary: "Revoke an invitation",
		Description: "Its link stops working at once; the address can be invited again. 404 when it was revoked already, 409 " +
			"`invitation-accepted` when it was accepted (manage the user instead). Audited (`user.invitation_revoked`).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *userIDInput) (*struct{}, error) {
		return nil, s.deps.Auth.RevokeInvitation(ctx, caller(ctx), in.ID)
	})

	const badToken = " An unknown, expired, revoked or used token is 404 `invalid-invitation`, the same for each, and costs the " +
		"client address an attempt of the sign-in throttle (20, then 1 every 15 s; 429 `too-many-attempts` with Retry-After)."
	pub := []string{"Authentication"}
	op(s, huma.Operation{
		OperationID: "lookup-invitation", Method: http.MethodPost, Path: "/api/v1/auth/invitation", Tags: pub,
		Summary:     "Accept an invitation, step 1: whom it is for",
		Description: "The address and role of a pending invitation, and when it expires. The token is sent in the body, never in the URL." + badToken,
		Errors:      []int{http.StatusNotFound, http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *invitationTokenInput) (*invitationLookupOutput, error) {
		inv, err := s.deps.Auth.LookupInvitation(ctx, clientOf(ctx), in.Body.Token)
		if err != nil {
			return nil, err
		}
		out := &invitationLookupOutput{}
		out.Body.Email, out.Body.Admin, out.Body.ExpiresAt = inv.Email, inv.Admin, inv.ExpiresAt
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "invitation-enrollment", Method: http.MethodPost, Path: "/api/v1/auth/invitation/enrollment", Tags: pub,
		Summary: "Accept an invitation, step 2: the second factor",
		Description: "Issues the invitee's TOTP secret, with its otpauth:// URI and that as a QR code, in this answer only: add it " +
			"to an authenticator app, then accept with a code it shows. Each call issues a new secret and the earlier one stops " +
			"counting." + badToken,
		Errors: []int{http.StatusNotFound, http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *invitationTokenInput) (*invitationEnrollmentOutput, error) {
		inv, en, err := s.deps.Auth.InvitationEnrollment(ctx, clientOf(ctx), in.Body.Token)
		if err != nil {
			return nil, err
		}
		svg, err := en.QRCodeSVG()
		if err != nil {
			return nil, err
		}
		out := &invitationEnrollmentOutput{}
		out.Body.Email, out.Body.TOTPSecret, out.Body.TOTPURI, out.Body.TOTPQRCode = inv.Email, en.Secret, en.URI, svg
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "accept-invitation", Method: http.MethodPost, Path: "/api/v1/auth/invitation/accept", Tags: pub,
		Summary: "Accept an invitation, step 3: password and code",
		Description: "Creates the invitee's account with the password (the rules of every password: 12 to 128 characters, not " +
			"a commonly used or leaked one, not the e-mail address; 422 otherwise) and the secret of the enrollment, proven by a " +
			"code of it (422 on the field `code` when wrong; wrong codes count toward the sign-in throttles of the account and " +
			"address as at sign-in). 409 `enrollment-required` before an enrollment; 409 `email-taken` when the address became " +
			"a user meanwhile. An invitation is accepted once: of acceptances sent at once, one creates the account and the others " +
			"get 404 `invalid-invitation`. On success the invitee is signed in, as by /api/v1/auth/2fa/verify: an access token, " +
			"the refresh cookie and the device cookie. Audited (`user.invitation_accepted`)." + badToken,
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusTooManyRequests},
	}, Public, func(ctx context.Context, in *invitationAcceptInput) (*tokenOutput, error) {
		t, err := s.deps.Auth.AcceptInvitation(ctx, clientOf(ctx), in.Body.Token, in.Body.Password, in.Body.Code,
			s.cookie.read(requestFrom(ctx), deviceCookieBase))
		if err != nil {
			return nil, err
		}
		return s.tokens(t), nil
	})
}

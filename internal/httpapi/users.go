package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
)

type usersOutput struct {
	Body struct {
		Users []auth.User `json:"users"`
	}
}

type userIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type userChangeInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body struct {
		Admin    *bool `json:"admin,omitempty" doc:"true: an administrator; false: a member"`
		Disabled *bool `json:"disabled,omitempty" doc:"true: the user cannot sign in, and its sessions end at once; false: enabled again"`
	}
}

type userTOTPOutput struct {
	Body struct {
		User       auth.User `json:"user"`
		TOTPSecret string    `json:"totp_secret" doc:"The new TOTP secret (base32), shown in this answer only"`
		TOTPURI    string    `json:"totp_uri" doc:"otpauth:// URI of the secret, for a QR code; shown in this answer only"`
	}
}

func (s *Server) registerUsers() {
	tags := []string{"Users"}
	op(s, huma.Operation{
		OperationID: "list-users", Method: http.MethodGet, Path: "/api/v1/users", Tags: tags,
		Summary:     "Every user, with role, state and last sign-in",
		Description: "`last_sign_in_at` is the newest sign-in among the sessions kept (absent when none).",
	}, Admin, func(ctx context.Context, _ *struct{}) (*usersOutput, error) {
		list, err := s.deps.Auth.ListUsers(ctx)
		if err != nil {
			return nil, err
		}
		out := &usersOutput{}
		out.Body.Users = list
		if out.Body.Users == nil {
			out.Body.Users = []auth.User{}
		}
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "change-user", Method: http.MethodPatch, Path: "/api/v1/users/{id}", Tags: tags,
		Summary: "Change a user's role, or disable or enable it",
		Description: "Disabling ends every session of the user at once (its live streams close within seconds) and forgets the devices it " +
			"signed in from. The last enabled administrator can be neither made a member nor disabled: 409 last-admin. Audited " +
			"(`user.role_changed`, `user.disabled`, `user.enabled`).",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *userChangeInput) (*bodyOutput[auth.User], error) {
		if in.Body.Admin == nil && in.Body.Disabled == nil {
			return nil, fault.Invalidf("body", "give admin, disabled or both")
		}
		return reply(s.deps.Auth.ChangeUser(ctx, caller(ctx), in.ID, auth.UserChange{Admin: in.Body.Admin, Disabled: in.Body.Disabled}))
	})

	op(s, huma.Operation{
		OperationID: "reset-user-2fa", Method: http.MethodPost, Path: "/api/v1/users/{id}/reset-2fa", Tags: tags,
		Summary: "Give a user a new second factor",
		Description: "The old TOTP secret stops working, every session of the user ends and its devices are forgotten. The new secret " +
			"is in this answer only: hand it to the user to add to their authenticator app. Audited (`user.2fa.reset`).",
		Errors: []int{http.StatusNotFound},
	}, Admin, func(ctx context.Context, in *userIDInput) (*userTOTPOutput, error) {
		u, en, err := s.deps.Auth.ResetTOTPByID(ctx, caller(ctx), in.ID)
		if err != nil {
			return nil, err
		}
		out := &userTOTPOutput{}
		out.Body.User, out.Body.TOTPSecret, out.Body.TOTPURI = u, en.Secret, en.URI
		return out, nil
	})

	op(s, huma.Operation{
		OperationID: "delete-user", Method: http.MethodDelete, Path: "/api/v1/users/{id}", Tags: tags,
		Summary: "Delete a user",
		Description: "Deletes the user with its sessions, devices and inbox; what it did stays in the audit log. The last enabled " +
			"administrator cannot be deleted: 409 last-admin. Audited (`user.deleted`).",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, func(ctx context.Context, in *userIDInput) (*struct{}, error) {
		return nil, s.deps.Auth.DeleteUser(ctx, caller(ctx), in.ID)
	})
}

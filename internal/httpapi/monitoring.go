package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/capstan-dev/capstan/internal/monitoring"
)

var errNoMonitoring = errors.New("httpapi: Deps.Monitoring is not set")

// kindsDoc documents every rule kind: unit, bounds, defaults, scopes.
func kindsDoc() string {
	var b strings.Builder
	b.WriteString("| kind | alert is about | unit | threshold bounds | default threshold | default duration | resolves | scopes | condition |\n" +
		"|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range monitoring.Kinds {
		bounds, def, res := fmt.Sprintf("%g to %g", k.Min, k.Max), fmt.Sprintf("%g", k.Threshold), "when the condition clears"
		if k.Unit == "none" {
			bounds, def = "0 only", "0"
		}
		if k.Hysteresis > 0 {
			res = fmt.Sprintf("%g %s past the threshold", k.Hysteresis, k.Unit)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %d s | %s | %s | %s |\n", k.Kind, k.Subject, k.Unit, bounds, def,
			int(k.Duration.Seconds()), res, strings.Join(k.Scopes, ", "), k.Condition)
	}
	return b.String()
}

type ruleIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

type ruleListOutput struct {
	Body struct {
		Rules []monitoring.Rule `json:"rules" doc:"Oldest first"`
		Kinds []kindView        `json:"kinds" doc:"Every kind a rule may have, with its unit, threshold bounds, scopes and defaults"`
	}
}

// kindView is a rule kind as the API shows it, so that a client offers
// the bounds, scopes and defaults the control plane enforces.
type kindView struct {
	monitoring.KindSpec
	Duration int `json:"default_duration" doc:"Seconds a new rule's condition must hold by default"`
}

func kindViews() []kindView {
	out := make([]kindView, len(monitoring.Kinds))
	for i, k := range monitoring.Kinds {
		out[i] = kindView{KindSpec: k, Duration: int(k.Duration / time.Second)}
	}
	return out
}

type ruleCreateInput struct {
	Body monitoring.NewRule
}

type rulePatchInput struct {
	ID   string `path:"id" maxLength:"64"`
	Body monitoring.RulePatch
}

type alertListInput struct {
	State  string `query:"state" default:"open" enum:"open,resolved,all" doc:"open (default), resolved or all"`
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Alerts per page: 1 to 200; default 50 when absent"`
	Before string `query:"before" maxLength:"64" doc:"Cursor from next_cursor of the previous page"`
}

type alertListOutput struct {
	Body struct {
		Alerts     []monitoring.Alert `json:"alerts" doc:"Newest first"`
		NextCursor string             `json:"next_cursor,omitempty" doc:"Pass as before= for the next page; absent on the last page"`
	}
}

type alertIDInput struct {
	ID string `path:"id" maxLength:"64"`
}

func (s *Server) registerMonitoring() {
	tags := []string{"Monitoring"}
	rulesDoc := "Rule kinds (a fresh control plane has one enabled rule of every kind, scope all, with these defaults):\n\n" + kindsDoc() +
		"\nA condition must hold for the rule's duration (seconds) before an alert opens; there is at most one open alert per rule " +
		"and subject. Rules are evaluated every 30 seconds and on POST /api/v1/monitoring/evaluate."
	op(s, huma.Operation{
		OperationID: "list-alert-rules", Method: http.MethodGet, Path: "/api/v1/monitoring/rules", Tags: tags,
		Summary: "Alert rules", Description: rulesDoc,
	}, SignedIn, func(ctx context.Context, _ *struct{}) (*ruleListOutput, error) {
		if s.deps.Monitoring == nil {
			return nil, errNoMonitoring
		}
		list, err := s.deps.Monitoring.Rules(ctx)
		if err != nil {
			return nil, err
		}
		out := &ruleListOutput{}
		out.Body.Rules, out.Body.Kinds = list, kindViews()
		if out.Body.Rules == nil {
			out.Body.Rules = []monitoring.Rule{}
		}
		return out, nil
	})
	op(s, huma.Operation{
		OperationID: "create-alert-rule", Method: http.MethodPost, Path: "/api/v1/monitoring/rules", Tags: tags,
		Summary: "Create an alert rule",
		Description: "Fields left out take the kind's defaults. An unknown kind or scope, a scope the kind does not allow, or a threshold " +
			"or duration out of bounds is a 422 and stores nothing. Audited.\n\n" + rulesDoc,
		DefaultStatus: http.StatusCreated,
	}, Admin, needs(s.hasMonitoring, func(ctx context.Context, in *ruleCreateInput) (*bodyOutput[monitoring.Rule], error) {
		return reply(s.deps.Monitoring.CreateRule(ctx, caller(ctx), in.Body))
	}))
	op(s, huma.Operation{
		OperationID: "update-alert-rule", Method: http.MethodPatch, Path: "/api/v1/monitoring/rules/{id}", Tags: tags,
		Summary: "Change an alert rule's threshold, duration, severity, name or enabled flag",
		Description: "Fields left out stay. Out-of-bounds values are a 422 and change nothing. Disabling a rule resolves its open alerts " +
			"at the next evaluation. Audited.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasMonitoring, func(ctx context.Context, in *rulePatchInput) (*bodyOutput[monitoring.Rule], error) {
		return reply(s.deps.Monitoring.UpdateRule(ctx, caller(ctx), in.ID, in.Body))
	}))
	op(s, huma.Operation{
		OperationID: "delete-alert-rule", Method: http.MethodDelete, Path: "/api/v1/monitoring/rules/{id}", Tags: tags,
		Summary:       "Delete an alert rule",
		Description:   "Its open alerts resolve at the next evaluation; its alerts stay listed. Audited.",
		DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound},
	}, Admin, func(ctx context.Context, in *ruleIDInput) (*struct{}, error) {
		if s.deps.Monitoring == nil {
			return nil, errNoMonitoring
		}
		return &struct{}{}, s.deps.Monitoring.DeleteRule(ctx, caller(ctx), in.ID)
	})
	op(s, huma.Operation{
		OperationID: "list-alerts", Method: http.MethodGet, Path: "/api/v1/monitoring/alerts", Tags: tags,
		Summary: "Alerts, newest first",
		Description: "Each alert names its rule, kind, severity, subject, the value that opened it (in the kind's unit), when it opened " +
			"and resolved, and who acknowledged it.",
	}, SignedIn, needs(s.hasMonitoring, func(ctx context.Context, in *alertListInput) (*alertListOutput, error) {
		list, err := s.deps.Monitoring.Alerts(ctx, in.State, in.Limit+1, in.Before)
		if err != nil {
			return nil, err
		}
		out := &alertListOutput{}
		if len(list) > in.Limit {
			list = list[:in.Limit]
			out.Body.NextCursor = list[len(list)-1].ID
		}
		if list, err = narrowList(ctx, s, list, alertTarget); err != nil {
			return nil, err
		}
		out.Body.Alerts = list
		if out.Body.Alerts == nil {
			out.Body.Alerts = []monitoring.Alert{}
		}
		return out, nil
	}))
	op(s, huma.Operation{
		OperationID: "acknowledge-alert", Method: http.MethodPost, Path: "/api/v1/monitoring/alerts/{id}/acknowledge", Tags: tags,
		Summary: "Acknowledge an open alert",
		Description: "Records who acknowledged it and when; acknowledging again changes nothing. A resolved alert is a 409 " +
			"(alert-resolved). Audited.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, Admin, needs(s.hasMonitoring, func(ctx context.Context, in *alertIDInput) (*bodyOutput[monitoring.Alert], error) {
		return reply(s.deps.Monitoring.Acknowledge(ctx, caller(ctx), in.ID))
	}))
	op(s, huma.Operation{
		OperationID: "evaluate-alert-rules", Method: http.MethodPost, Path: "/api/v1/monitoring/evaluate", Tags: tags,
		Summary:     "Evaluate every alert rule now",
		Description: "Answers with the alerts this evaluation opened and resolved (publishing alert.opened and alert.resolved).",
	}, Admin, func(ctx context.Context, _ *struct{}) (*bodyOutput[monitoring.Outcome], error) {
		if s.deps.Monitoring == nil {
			return nil, errNoMonitoring
		}
		return reply(s.deps.Monitoring.Evaluate(ctx))
	})
}

// alertTarget is what an alert is about, for a narrowed token's list: a
// server (its filesystems too), an application or a database instance. A
// domain's alerts name no resource a token can be narrowed to.
func alertTarget(a monitoring.Alert) target {
	switch a.Subject.Type {
	case "server", "filesystem":
		return target{server: a.Subject.ID}
	case "application":
		return target{app: a.Subject.ID}
	case "database":
		return target{db: a.Subject.ID}
	}
	return target{}
}

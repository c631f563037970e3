package console

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

func (e Executors) registerAdmin(r agent.Registry) {
	engine.Handle(r, agentproto.DBDatabaseCreate, adminHandler(func(ctx context.Context, c engine.Admin, p agentproto.DBDatabasePayload, _ map[string]string) (agentproto.DBAdminResult, error) {
		if err := checkIdent(p.Target.Engine, agentproto.DBIdentDatabase, "name", p.Name); err != nil {
			return agentproto.DBAdminResult{}, err
		}
		if p.Owner != "" {
			if err := checkIdent(p.Target.Engine, agentproto.DBIdentUser, "owner", p.Owner); err != nil {
				return agentproto.DBAdminResult{}, err
			}
		}
		st, err := c.CreateDatabase(ctx, p.Name, p.Owner)
		return agentproto.DBAdminResult{Statements: st}, err
	}))
	engine.Handle(r, agentproto.DBDatabaseDrop, adminHandler(func(ctx context.Context, c engine.Admin, p agentproto.DBDatabasePayload, _ map[string]string) (agentproto.DBAdminResult, error) {
		if err := checkIdent(p.Target.Engine, agentproto.DBIdentDatabase, "name", p.Name); err != nil {
			return agentproto.DBAdminResult{}, err
		}
		st, existed, err := c.DropDatabase(ctx, p.Name)
		return agentproto.DBAdminResult{Statements: st, Existed: &existed}, err
	}))
	engine.Handle(r, agentproto.DBUserCreate, adminHandler(func(ctx context.Context, c engine.Admin, p agentproto.DBUserPayload, secrets map[string]string) (agentproto.DBAdminResult, error) {
		if err := checkUser(p); err != nil {
			return agentproto.DBAdminResult{}, err
		}
		pw, err := newPassword(secrets)
		if err != nil {
			return agentproto.DBAdminResult{}, err
		}
		st, err := c.CreateUser(ctx, p, pw)
		return agentproto.DBAdminResult{Statements: st}, err
	}))
	engine.Handle(r, agentproto.DBUserRotate, adminHandler(func(ctx context.Context, c engine.Admin, p agentproto.DBUserPayload, secrets map[string]string) (agentproto.DBAdminResult, error) {
		if err := checkIdent(p.Target.Engine, agentproto.DBIdentUser, "username", p.Username); err != nil {
			return agentproto.DBAdminResult{}, err
		}
		pw, err := newPassword(secrets)
		if err != nil {
			return agentproto.DBAdminResult{}, err
		}
		st, err := c.RotateUser(ctx, p.Username, pw)
		return agentproto.DBAdminResult{Statements: st}, err
	}))
	engine.Handle(r, agentproto.DBUserDrop, adminHandler(func(ctx context.Context, c engine.Admin, p agentproto.DBUserPayload, _ map[string]string) (agentproto.DBAdminResult, error) {
		if err := checkIdent(p.Target.Engine, agentproto.DBIdentUser, "username", p.Username); err != nil {
			return agentproto.DBAdminResult{}, err
		}
		if p.Database != "" {
			if err := checkIdent(p.Target.Engine, agentproto.DBIdentDatabase, "database", p.Database); err != nil {
				return agentproto.DBAdminResult{}, err
			}
		}
		st, existed, err := c.DropUser(ctx, p)
		return agentproto.DBAdminResult{Statements: st, Existed: &existed}, err
	}))
}

// targeted is a payload with a target.
type targeted interface {
	agentproto.DBDatabasePayload | agentproto.DBUserPayload
}

func targetOf(p any) agentproto.DBTarget {
	switch v := p.(type) {
	case *agentproto.DBDatabasePayload:
		return v.Target
	case *agentproto.DBUserPayload:
		return v.Target
	}
	return agentproto.DBTarget{}
}

// adminHandler connects as the admin login and runs fn.
func adminHandler[P targeted](fn func(context.Context, engine.Admin, P, map[string]string) (agentproto.DBAdminResult, error)) func(context.Context, agent.Call[P]) (agentproto.DBAdminResult, error) {
	return func(ctx context.Context, c agent.Call[P]) (agentproto.DBAdminResult, error) {
		conn, err := connect(ctx, targetOf(&c.Payload), c.Secrets, "")
		if err != nil {
			return agentproto.DBAdminResult{}, err
		}
		defer conn.Close()
		res, err := fn(ctx, conn.(engine.Admin), c.Payload, c.Secrets)
		for _, s := range res.Statements {
			c.Events.Emit(agentproto.LevelInfo, s, nil)
		}
		if err != nil {
			return agentproto.DBAdminResult{}, err
		}
		if res.Statements == nil {
			res.Statements = []string{}
		}
		return res, nil
	}
}

func checkIdent(engine, kind, field, name string) error {
	if p := agentproto.DBIdentifierProblem(engine, kind, name); p != "" {
		return fmt.Errorf("invalid %s %q: %s", field, name, p)
	}
	return nil
}

// checkUser checks a db.user.create payload.
func checkUser(p agentproto.DBUserPayload) error {
	e := p.Target.Engine
	if err := checkIdent(e, agentproto.DBIdentUser, "username", p.Username); err != nil {
		return err
	}
	switch agentproto.EngineKind(e) {
	case agentproto.EngineKindSQL:
		if err := checkIdent(e, agentproto.DBIdentDatabase, "database", p.Database); err != nil {
			return err
		}
		switch p.Access {
		case agentproto.DBAccessReadOnly, agentproto.DBAccessReadWrite, agentproto.DBAccessAdmin:
		default:
			return fmt.Errorf("invalid access %q: readonly, readwrite or admin", p.Access)
		}
	case agentproto.EngineKindKV:
		if pr := agentproto.DBKeyPatternProblem(p.KeyPattern); pr != "" {
			return fmt.Errorf("invalid key_pattern: %s", pr)
		}
		if p.Access != agentproto.DBAccessReadOnly && p.Access != agentproto.DBAccessReadWrite {
			return fmt.Errorf("invalid access %q: readonly or readwrite", p.Access)
		}
	default:
		return fmt.Errorf("unknown engine %q", e)
	}
	return nil
}

// newPassword is the login's new password from the job's secrets.
func newPassword(secrets map[string]string) (string, error) {
	pw := secrets[agentproto.SecretDBNewPassword]
	if pw == "" {
		return "", errors.New("the job has no new password (secret " + agentproto.SecretDBNewPassword + ")")
	}
	if strings.ContainsRune(pw, 0) {
		return "", errors.New("the new password contains NUL")
	}
	return pw, nil
}

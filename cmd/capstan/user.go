package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mdp/qrterminal/v3"
	"golang.org/x/term"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/auth"
	"github.com/capstan-dev/capstan/internal/fault"
)

type userCmd struct {
	Create   userCreateCmd   `cmd:"" help:"Create a user and print its TOTP enrolment."`
	List     userListCmd     `cmd:"" help:"List users."`
	Reset2FA userReset2FACmd `cmd:"" name:"reset-2fa" help:"Give a user a new TOTP secret; the old one stops working."`
	Disable  userDisableCmd  `cmd:"" help:"Disable a user and end its sessions at once."`
	Unlock   userUnlockCmd   `cmd:"" help:"Lift, before it passes, the delay that strangers' failed sign-in attempts put on a user."`
}

// onHost is the caller of commands run on the control plane host.
var onHost = audit.Caller{Actor: audit.Actor{Type: audit.ActorSystem, ID: "cli"}}

type userCreateCmd struct {
	StoreFlags
	Email         string `required:"" help:"E-mail address (the sign-in name)."`
	Admin         bool   `help:"Make the user an administrator."`
	PasswordStdin bool   `name:"password-stdin" help:"Read the password from the first line of standard input."`
	JSON          bool   `name:"json" help:"Print one JSON object instead of text and a QR code."`
}

// readPassword takes the password from stdin or, on a terminal, a prompt.
func readPassword(fromStdin bool, prompt string) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return "", errors.New("no terminal to ask for the password: pass --password-stdin and write it to standard input")
	}
	fmt.Fprint(os.Stderr, prompt)
	b, err := term.ReadPassword(int(os.Stdin.Fd()))
	fmt.Fprintln(os.Stderr)
	return string(b), err
}

// explain turns validation faults into readable CLI errors.
func explain(err error) error {
	if fe := fault.As(err); fe != nil && len(fe.Fields) > 0 {
		var parts []string
		for _, f := range fe.Fields {
			parts = append(parts, f.Field+" "+f.Message)
		}
		return errors.New(strings.Join(parts, "; "))
	}
	if fe := fault.As(err); fe != nil && fe.Kind != fault.Internal {
		return errors.New(fe.Message)
	}
	return err
}

func printEnrollment(u auth.User, en auth.Enrollment, asJSON bool, verb string) error {
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{
			"id": u.ID, "email": u.Email, "admin": u.Admin, "totp_secret": en.Secret, "otpauth_uri": en.URI,
		})
	}
	role := "user"
	if u.Admin {
		role = "administrator"
	}
	fmt.Printf("%s %s %s (%s).\n\n", verb, role, u.Email, u.ID)
	fmt.Println("Scan this code with an authenticator app (or enter the secret by hand):")
	qrterminal.GenerateHalfBlock(en.URI, qrterminal.L, os.Stdout)
	fmt.Printf("\n  secret: %s\n  uri:    %s\n", en.Secret, en.URI)
	return nil
}

func (c *userCreateCmd) Run(ctx context.Context) error {
	pw, err := readPassword(c.PasswordStdin, "Password for "+c.Email+": ")
	if err != nil {
		return err
	}
	a, err := openApp(ctx, c.StoreFlags, "")
	if err != nil {
		return err
	}
	defer a.Close()
	u, en, err := a.auth.CreateUser(ctx, onHost, c.Email, pw, c.Admin)
	if err != nil {
		return explain(err)
	}
	return printEnrollment(u, en, c.JSON, "Created")
}

type userListCmd struct {
	StoreFlags
	JSON bool `name:"json" help:"Print JSON."`
}

func (c *userListCmd) Run(ctx context.Context) error {
	a, err := openApp(ctx, c.StoreFlags, "")
	if err != nil {
		return err
	}
	defer a.Close()
	users, err := a.auth.ListUsers(ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		if users == nil {
			users = []auth.User{}
		}
		return json.NewEncoder(os.Stdout).Encode(users)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEMAIL\tADMIN\tDISABLED\tCREATED")
	for _, u := range users {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%t\t%s\n", u.ID, u.Email, u.Admin, u.Disabled, u.CreatedAt.Format("2006-01-02 15:04:05Z"))
	}
	return tw.Flush()
}

type userReset2FACmd struct {
	StoreFlags
	Email string `required:"" help:"E-mail address of the user."`
	JSON  bool   `name:"json" help:"Print one JSON object instead of text and a QR code."`
}

func (c *userReset2FACmd) Run(ctx context.Context) error {
	a, err := openApp(ctx, c.StoreFlags, "")
	if err != nil {
		return err
	}
	defer a.Close()
	u, en, err := a.auth.ResetTOTP(ctx, onHost, c.Email)
	if err != nil {
		return explain(err)
	}
	return printEnrollment(u, en, c.JSON, "New TOTP secret for")
}

type userDisableCmd struct {
	StoreFlags
	Email string `required:"" help:"E-mail address of the user."`
}

func (c *userDisableCmd) Run(ctx context.Context) error {
	a, err := openApp(ctx, c.StoreFlags, "")
	if err != nil {
		return err
	}
	defer a.Close()
	u, err := a.auth.DisableUser(ctx, onHost, c.Email)
	if err != nil {
		return explain(err)
	}
	fmt.Printf("Disabled %s (%s); its sessions have ended.\n", u.Email, u.ID)
	return nil
}

type userUnlockCmd struct {
	StoreFlags
	Email string `required:"" help:"E-mail address of the user."`
}

func (c *userUnlockCmd) Run(ctx context.Context) error {
	a, err := openApp(ctx, c.StoreFlags, "")
	if err != nil {
		return err
	}
	defer a.Close()
	u, delayed, err := a.auth.UnlockUser(ctx, onHost, c.Email)
	if err != nil {
		return explain(err)
	}
	if delayed {
		fmt.Printf("Unlocked %s (%s): strangers' failed sign-ins no longer delay it.\n", u.Email, u.ID)
	} else {
		fmt.Printf("%s (%s) had no recent failed sign-ins from strangers.\n", u.Email, u.ID)
	}
	return nil
}

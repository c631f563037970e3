package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/capstan-dev/capstan/internal/platform"
)

type recoveryKitCmd struct {
	Open recoveryKitOpenCmd `cmd:"" help:"Decrypt a recovery kit and print what it holds (password on standard input)."`
}

type recoveryKitOpenCmd struct {
	File string `required:"" type:"existingfile" help:"The recovery kit file."`
	JSON bool   `name:"json" help:"Print the kit as JSON."`
}

func (c *recoveryKitOpenCmd) Run(ctx context.Context) error {
	pw, err := readPassword(true, "")
	if err != nil {
		return err
	}
	f, err := os.Open(c.File)
	if err != nil {
		return err
	}
	defer f.Close()
	kit, err := platform.OpenRecoveryKit(f, pw)
	if err != nil {
		return err
	}
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(kit)
	}
	fmt.Printf("Recovery kit created %s\n", kit.CreatedAt.Format("2006-01-02 15:04:05Z"))
	fmt.Printf("  public URL:     %s\n", kit.PublicURL)
	fmt.Printf("  version:        %s\n", kit.Version)
	fmt.Printf("  schema:         %s, version %d\n", kit.Schema.Dialect, kit.Schema.Version)
	fmt.Printf("  secret key id:  %s\n", kit.SecretKeyID)
	fmt.Printf("  secret key:     %s\n", kit.SecretKey)
	if kit.ArtifactIdentity != "" {
		fmt.Printf("  artifact key:   %s\n", kit.ArtifactIdentity)
	}
	fmt.Println("\nTo restore, start capstan with CAPSTAN_SECRET_KEY set to the secret key (or write it to secret.key in the data dir, mode 0600).")
	if kit.ArtifactIdentity != "" {
		fmt.Println("The artifact key decrypts database export files (data dir artifacts/*.age) with the age tool: age -d -i KEYFILE.")
	}
	return nil
}

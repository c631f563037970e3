package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/capstan-dev/capstan/internal/platform"
	"github.com/capstan-dev/capstan/internal/secrets"
)

type recoveryKitCmd struct {
	Open     recoveryKitOpenCmd     `cmd:"" help:"Decrypt a recovery kit and print what it holds (password on standard input)."`
	Identity recoveryKitIdentityCmd `cmd:"" help:"Print the age identity that decrypts a database instance's backups and exports, derived from a recovery kit (password on standard input)."`
}

type recoveryKitIdentityCmd struct {
	File     string `required:"" type:"existingfile" help:"The recovery kit file."`
	Instance string `xor:"which" required:"" help:"The database instance (db_…) whose backups and exports to decrypt."`
	KeyID    string `xor:"which" required:"" name:"key-id" help:"The key id a backup or export records (its key_id: inst-v1:<instance id>, or fleet-v1 for those made before per-instance keys)."`
}

// Run prints the identity in age's identity file format: save it to a
// file (0600) and decrypt with age -d -i FILE.
func (c *recoveryKitIdentityCmd) Run(ctx context.Context) error {
	keyID := c.KeyID
	if c.Instance != "" {
		keyID = secrets.InstanceKeyID(c.Instance)
	}
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
	id, err := kit.Identity(keyID)
	if err != nil {
		return err
	}
	fmt.Printf("# Capstan identity of key %s, derived from the recovery kit of %s.\n", keyID, kit.PublicURL)
	fmt.Printf("# Decrypts its backups and exports: age -d -i THIS_FILE BACKUP.age | gunzip > BACKUP.sql\n")
	fmt.Printf("# public key: %s\n%s\n", id.Recipient(), id)
	return nil
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
		fmt.Println("The artifact key decrypts the backups and database exports made before per-instance keys (key_id fleet-v1) with the age tool: age -d -i KEYFILE.")
	}
	fmt.Println("Newer backups and exports are encrypted to their database instance's own key (key_id inst-v1:<instance id>): print it with")
	fmt.Println("capstan recovery-kit identity --file KIT --instance <instance id>.")
	return nil
}

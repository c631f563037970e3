package main

import (
	"context"
	"fmt"
)

type migrateCmd struct {
	StoreFlags
}

func (c *migrateCmd) Run(ctx context.Context) error {
	a, err := openApp(ctx, c.StoreFlags, "")
	if err != nil {
		return err
	}
	defer a.Close()
	fmt.Printf("schema is at version %d (%s)\n", a.schema, a.store.DialectName())
	return nil
}

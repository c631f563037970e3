package engine

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/agent/rdb"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// RedisSync writes the server's RDB snapshot to w, read through the
// replication protocol.
func RedisSync(ctx context.Context, t agentproto.DBTarget, password string, w io.Writer) error {
	tc, err := tlsConfig(t)
	if err != nil {
		return err
	}
	d := &net.Dialer{Timeout: ConnectTimeout}
	var conn net.Conn
	if tc != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", address(t))
	} else {
		conn, err = d.DialContext(ctx, "tcp", address(t))
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	br := bufio.NewReaderSize(conn, 64<<10)
	if password != "" {
		args := []string{"AUTH", password}
		if t.Username != "" && t.Username != "default" {
			args = []string{"AUTH", t.Username, password}
		}
		if err := respCommand(conn, args...); err != nil {
			return err
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("AUTH: %w", err)
		}
		if !strings.HasPrefix(line, "+") {
			return fmt.Errorf("AUTH: %s", strings.TrimSpace(strings.TrimPrefix(line, "-")))
		}
	}
	if err := respCommand(conn, "SYNC"); err != nil {
		return err
	}
	// Newlines keep the connection alive while the server writes the
	// snapshot; then "$<size>\r\n" and the snapshot's bytes.
	for {
		c, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("SYNC: %w", err)
		}
		if c == '\n' {
			continue
		}
		if err := br.UnreadByte(); err != nil {
			return err
		}
		break
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("SYNC: %w", err)
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "$") {
		return fmt.Errorf("SYNC: %s", strings.TrimPrefix(line, "-"))
	}
	size, err := strconv.ParseInt(line[1:], 10, 64)
	if err != nil || size < 0 {
		return fmt.Errorf("SYNC: unexpected answer %q", line)
	}
	n, err := io.CopyN(w, br, size)
	if err != nil {
		return fmt.Errorf("SYNC: after %d of the snapshot's %d bytes: %w", n, size, err)
	}
	return nil
}

// respCommand sends a command in RESP.
func respCommand(w io.Writer, args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RedisManifest counts the keys of a running server as rdb.Parse does.
func RedisManifest(ctx context.Context, addr string) (agentproto.BackupManifest, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	info, err := c.Info(ctx, "keyspace").Result()
	if err != nil {
		return agentproto.BackupManifest{}, err
	}
	t := rdb.NewTally()
	for db := range parseInfo(info)["keyspace"] {
		n, err := strconv.Atoi(strings.TrimPrefix(db, "db"))
		if err != nil {
			continue
		}
		if err := tallyDB(ctx, c, n, t); err != nil {
			return agentproto.BackupManifest{}, fmt.Errorf("db%d: %w", n, err)
		}
	}
	return t.Manifest(), nil
}

func tallyDB(ctx context.Context, c *redis.Client, db int, t *rdb.Tally) error {
	conn := c.Conn()
	defer conn.Close()
	if err := conn.Select(ctx, db).Err(); err != nil {
		return err
	}
	var cursor uint64
	for {
		keys, next, err := conn.Scan(ctx, cursor, "", 1000).Result()
		if err != nil {
			return err
		}
		pipe := conn.Pipeline()
		types := make([]*redis.StatusCmd, len(keys))
		for i, k := range keys {
			types[i] = pipe.Type(ctx, k)
		}
		if len(keys) > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		for i, k := range keys {
			t.Add(db, types[i].Val(), []byte(k))
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// WaitLoaded waits until the throwaway server at addr answers with its
// data loaded, and returns its version as it reports it; it fails with
// the server's output when exited says the server exited.
func WaitLoaded(ctx context.Context, addr string, exited func(context.Context) (bool, string, error)) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: 2 * time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		info, err := c.Info(ctx, "server", "persistence").Result()
		if err == nil {
			if sections := parseInfo(info); sections["persistence"]["loading"] == "0" {
				if v := sections["server"]["valkey_version"]; v != "" {
					return v, nil
				}
				return sections["server"]["redis_version"], nil
			}
		}
		exited, out, ierr := exited(ctx)
		if ierr != nil {
			return "", ierr
		}
		if exited {
			return "", fmt.Errorf("the server did not load the snapshot: %s", out)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the server did not load the snapshot within 10 minutes: %v", err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

package engine

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Bounds of db.kv.
const (
	DefaultScanCount = 100
	MaxScanCount     = 1000
	DefaultMaxItems  = 100
	MaxItemsLimit    = 10000
	DefaultMaxBytes  = 256 << 10
	MaxBytesLimit    = 16 << 20
)

// redisConn is a connection to a Redis or Valkey server.
type redisConn struct {
	opts    *redis.Options
	client  *redis.Client
	version string
	loading bool // the server was still loading its dataset when connected
}

func connectRedis(ctx context.Context, t agentproto.DBTarget, password string, tc *tls.Config) (*redisConn, error) {
	user := t.Username
	if user == "default" {
		user = "" // AUTH with the password alone: servers without ACLs too
	}
	opts := &redis.Options{
		Addr: address(t), Username: user, Password: password, TLSConfig: tc,
		Protocol: 2, DisableIdentity: true, ClientName: "capstan-agent",
		// A command is sent once: a delete is not repeated after an
		// error whose outcome is unknown.
		MaxRetries: -1, DialerRetries: 1, DialTimeout: ConnectTimeout, ContextTimeoutEnabled: true,
		PoolSize: 1, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	c := &redisConn{opts: opts, client: redis.NewClient(opts)}
	// INFO answers while the server loads its dataset; most commands
	// do not (LOADING), so the connection says which it met.
	info, err := c.client.Info(ctx).Result() // the default sections: server and persistence among them, on every version
	if err != nil {
		c.Close()
		return nil, err
	}
	sections := parseInfo(info)
	server := sections["server"]
	c.loading = sections["persistence"]["loading"] == "1"
	c.version = server["redis_version"]
	if v := server["valkey_version"]; v != "" {
		c.version = v
	}
	return c, nil
}

func (c *redisConn) ServerVersion() string { return c.version }

// Loading reports whether the server was loading its dataset when the
// connection was made.
func (c *redisConn) Loading() bool { return c.loading }
func (c *redisConn) TLS() bool     { return c.opts.TLSConfig != nil }
func (c *redisConn) Close()        { c.client.Close() }

// redisError is err's Redis error, if it holds one: its code is the
// error's first word when that is in capitals (WRONGTYPE, NOAUTH).
func redisError(err error) (*EngineError, bool) {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return nil, false
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	if code == "" || strings.ToUpper(code) != code {
		code = ""
	}
	return &EngineError{agentproto.DBError{Code: code, Message: msg}}, true
}

// KV runs one db.kv action.
func (c *redisConn) KV(ctx context.Context, p agentproto.DBKVPayload) (*agentproto.DBKVResult, error) {
	client := c.client
	if p.DB != 0 {
		if p.DB < 0 {
			return nil, fmt.Errorf("invalid db %d", p.DB)
		}
		opts := *c.opts
		opts.DB = p.DB
		client = redis.NewClient(&opts)
		defer client.Close()
	}
	res := &agentproto.DBKVResult{Action: p.Action}
	var err error
	switch p.Action {
	case agentproto.KVInfo:
		var info string
		info, err = client.Info(ctx).Result()
		res.Info = parseInfo(info)
	case agentproto.KVScan:
		res.Cursor, res.Keys, err = scan(ctx, client, p)
	case agentproto.KVGet:
		res.Value, err = get(ctx, client, p)
	case agentproto.KVDelete:
		if len(p.Keys) == 0 {
			return nil, errors.New("delete needs the keys")
		}
		var n int64
		n, err = client.Del(ctx, p.Keys...).Result()
		res.Deleted = &n
	case agentproto.KVACLList:
		var lines []string
		lines, err = client.Do(ctx, "ACL", "LIST").StringSlice()
		res.ACLUsers = parseACL(lines)
	default:
		return nil, fmt.Errorf("unknown kv action %q", p.Action)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// parseInfo splits INFO's text into its sections, named in lower case.
func parseInfo(info string) map[string]map[string]string {
	out := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#"):
			section = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(line, "#")))
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			if out[section] == nil {
				out[section] = map[string]string{}
			}
			out[section][k] = v
		}
	}
	return out
}

// scan runs one SCAN step, with the type and TTL of each key found.
func scan(ctx context.Context, client *redis.Client, p agentproto.DBKVPayload) (string, []agentproto.KVKeyRef, error) {
	cursor := uint64(0)
	if p.Cursor != "" {
		var err error
		if cursor, err = strconv.ParseUint(p.Cursor, 10, 64); err != nil {
			return "", nil, fmt.Errorf("invalid cursor %q", p.Cursor)
		}
	}
	match := p.Match
	if match == "" {
		match = "*"
	}
	count := p.Count
	if count <= 0 {
		count = DefaultScanCount
	}
	count = min(count, MaxScanCount)
	keys, next, err := client.Scan(ctx, cursor, match, int64(count)).Result()
	if err != nil {
		return "", nil, err
	}
	pipe := client.Pipeline()
	types := make([]*redis.StatusCmd, len(keys))
	ttls := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		types[i] = pipe.Type(ctx, k)
		ttls[i] = pipe.Do(ctx, "TTL", k)
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return "", nil, err
		}
	}
	refs := []agentproto.KVKeyRef{}
	for i, k := range keys {
		typ := types[i].Val()
		if typ == "none" {
			continue // expired or deleted since the scan saw it
		}
		ttl, _ := ttls[i].Int64()
		refs = append(refs, agentproto.KVKeyRef{Key: k, Type: typ, TTLSeconds: ttl})
	}
	return strconv.FormatUint(next, 10), refs, nil
}

// errNoKey is the error of get for a key that does not exist.
var errNoKey = errors.New("no such key")

// get reads a key's value by its type: at most MaxItems items and about
// MaxBytes bytes of it, with its full size.
func get(ctx context.Context, client *redis.Client, p agentproto.DBKVPayload) (*agentproto.KVValue, error) {
	if p.Key == "" {
		return nil, errors.New("get needs a key")
	}
	maxItems := p.MaxItems
	if maxItems <= 0 {
		maxItems = DefaultMaxItems
	}
	maxItems = min(maxItems, MaxItemsLimit)
	maxBytes := p.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	maxBytes = min(maxBytes, MaxBytesLimit)

	typ, err := client.Type(ctx, p.Key).Result()
	if err != nil {
		return nil, err
	}
	if typ == "none" {
		return nil, fmt.Errorf("%w: %q", errNoKey, p.Key)
	}
	ttl, err := client.Do(ctx, "TTL", p.Key).Int64()
	if err != nil {
		return nil, err
	}
	v := &agentproto.KVValue{Key: p.Key, Type: typ, TTLSeconds: ttl}
	// budget takes n bytes of the value; false when they do not fit.
	used := 0
	budget := func(n int) bool {
		if used+n > maxBytes {
			v.Truncated = true
			return false
		}
		used += n
		return true
	}
	switch typ {
	case "string":
		if v.Size, err = client.StrLen(ctx, p.Key).Result(); err != nil {
			return nil, err
		}
		s, err := client.GetRange(ctx, p.Key, 0, int64(maxBytes)-1).Result()
		if err != nil {
			return nil, err
		}
		v.String = &s
		v.Truncated = int64(len(s)) < v.Size
	case "hash":
		if v.Size, err = client.HLen(ctx, p.Key).Result(); err != nil {
			return nil, err
		}
		v.Hash = map[string]string{}
		err = scanAll(ctx, maxItems, func(cursor uint64) ([]string, uint64, error) {
			return client.HScan(ctx, p.Key, cursor, "*", int64(maxItems)).Result()
		}, 2, func(kv []string) bool {
			if len(v.Hash) == maxItems || !budget(len(kv[0])+len(kv[1])) {
				return false
			}
			v.Hash[kv[0]] = kv[1]
			return true
		})
	case "set":
		if v.Size, err = client.SCard(ctx, p.Key).Result(); err != nil {
			return nil, err
		}
		v.Set = []string{}
		err = scanAll(ctx, maxItems, func(cursor uint64) ([]string, uint64, error) {
			return client.SScan(ctx, p.Key, cursor, "*", int64(maxItems)).Result()
		}, 1, func(m []string) bool {
			if len(v.Set) == maxItems || !budget(len(m[0])) {
				return false
			}
			v.Set = append(v.Set, m[0])
			return true
		})
	case "list":
		if v.Size, err = client.LLen(ctx, p.Key).Result(); err != nil {
			return nil, err
		}
		items, err := client.LRange(ctx, p.Key, 0, int64(maxItems)-1).Result()
		if err != nil {
			return nil, err
		}
		v.List = []string{}
		for _, it := range items {
			if !budget(len(it)) {
				break
			}
			v.List = append(v.List, it)
		}
	case "zset":
		if v.Size, err = client.ZCard(ctx, p.Key).Result(); err != nil {
			return nil, err
		}
		items, err := client.ZRangeWithScores(ctx, p.Key, 0, int64(maxItems)-1).Result()
		if err != nil {
			return nil, err
		}
		v.ZSet = []agentproto.KVScored{}
		for _, it := range items {
			m := fmt.Sprint(it.Member)
			if !budget(len(m) + 8) {
				break
			}
			v.ZSet = append(v.ZSet, agentproto.KVScored{Member: m, Score: it.Score})
		}
	case "stream":
		if v.Size, err = client.XLen(ctx, p.Key).Result(); err != nil {
			return nil, err
		}
		items, err := client.XRangeN(ctx, p.Key, "-", "+", int64(maxItems)).Result()
		if err != nil {
			return nil, err
		}
		v.Stream = []agentproto.KVStreamEntry{}
		for _, it := range items {
			e := agentproto.KVStreamEntry{ID: it.ID, Fields: map[string]string{}}
			n := len(it.ID)
			for f, val := range it.Values {
				e.Fields[f] = fmt.Sprint(val)
				n += len(f) + len(e.Fields[f])
			}
			if !budget(n) {
				break
			}
			v.Stream = append(v.Stream, e)
		}
	default:
		return nil, fmt.Errorf("key %q has type %s, which cannot be read here", p.Key, typ)
	}
	if err != nil {
		return nil, err
	}
	if n := int64(len(v.Hash) + len(v.Set) + len(v.List) + len(v.ZSet) + len(v.Stream)); typ != "string" && n < v.Size {
		v.Truncated = true
	}
	return v, nil
}

// scanAll runs a HSCAN/SSCAN-like step until take refuses an item or the
// scan ends; a step's reply is flat, width strings an item.
func scanAll(ctx context.Context, maxItems int, step func(cursor uint64) ([]string, uint64, error), width int, take func(item []string) bool) error {
	cursor := uint64(0)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		items, next, err := step(cursor)
		if err != nil {
			return err
		}
		for i := 0; i+width <= len(items); i += width {
			if !take(items[i : i+width]) {
				return nil
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// parseACL reads ACL LIST's lines ("user NAME on ~pattern +@read …").
// Password hashes are left out.
func parseACL(lines []string) []agentproto.KVACLUser {
	users := []agentproto.KVACLUser{}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "user" {
			continue
		}
		u := agentproto.KVACLUser{Name: f[1], KeyPatterns: []string{}}
		var cmds []string
		for _, tok := range f[2:] {
			switch {
			case tok == "on":
				u.Enabled = true
			case tok == "allkeys":
				u.KeyPatterns = append(u.KeyPatterns, "*")
			case strings.HasPrefix(tok, "~"):
				u.KeyPatterns = append(u.KeyPatterns, tok[1:])
			case strings.HasPrefix(tok, "%") && strings.Contains(tok, "~"):
				// %R~pattern, %W~pattern: read- or write-only patterns.
				u.KeyPatterns = append(u.KeyPatterns, tok)
			case strings.HasPrefix(tok, "+"), strings.HasPrefix(tok, "-"), tok == "allcommands", tok == "nocommands":
				cmds = append(cmds, tok)
			}
		}
		u.Commands = strings.Join(cmds, " ")
		users = append(users, u)
	}
	return users
}

// RedisAdmin is a connection to a Redis/Valkey instance as its admin
// login (KVAdmin).
type RedisAdmin interface {
	Conn
	// ACLList is ACL LIST: the server's users, a line each.
	ACLList(ctx context.Context) ([]string, error)
	// Persistence is INFO's persistence section.
	Persistence(ctx context.Context) (map[string]string, error)
	// ConfigSet is CONFIG SET key value.
	ConfigSet(ctx context.Context, key, value string) error
}

func (c *redisConn) ACLList(ctx context.Context) ([]string, error) {
	return c.client.Do(ctx, "ACL", "LIST").StringSlice()
}

func (c *redisConn) Persistence(ctx context.Context) (map[string]string, error) {
	info, err := c.client.Info(ctx, "persistence").Result()
	return parseInfo(info)["persistence"], err
}

func (c *redisConn) ConfigSet(ctx context.Context, key, value string) error {
	return c.client.ConfigSet(ctx, key, value).Err()
}

// KVAdmin connects to a Redis/Valkey instance as its admin login.
func KVAdmin(ctx context.Context, t agentproto.DBTarget, password string) (RedisAdmin, error) {
	c, err := Connect(ctx, t, password, "")
	if err != nil {
		return nil, err
	}
	rc, ok := c.(*redisConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s is not a key-value engine", t.Engine)
	}
	return rc, nil
}

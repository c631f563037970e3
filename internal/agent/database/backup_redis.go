package database

import (
	"bufio"
	"context"
	"crypto/md5"
	"crypto/tls"
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A Redis/Valkey backup is an RDB snapshot of the whole instance, taken
// the way a replica takes one: the agent sends SYNC, the server forks,
// writes the snapshot and streams it; the agent compresses, encrypts and
// uploads it as it arrives, and reads it on the way (parseRDB) for the
// manifest: per database ("db0", …) the number of keys and a checksum of
// their names and types, and the keys of each type. The manifest is of
// the snapshot itself, so it is exactly what the backup holds.
//
// Verification loads the snapshot into a throwaway redis-server of the
// same or a newer version (backup_redis_server.go), on a loopback port
// of the server, and counts what it loaded the same way (SCAN and TYPE).

// redisSource dumps a Redis/Valkey instance's snapshot.
func redisSource(ctx context.Context, p agentproto.BackupRunPayload, password string, events agent.EventSink,
	res *agentproto.BackupRunResult) (*dumpSource, error) {
	c, err := Connect(ctx, p.Target, password, "")
	if err != nil {
		return nil, err
	}
	res.ToolVersion = c.ServerVersion()
	c.Close()
	pr, pw := io.Pipe()
	parsed := make(chan rdbResult, 1)
	go func() {
		m, err := parseRDB(bufio.NewReaderSize(pr, 64<<10))
		if err != nil {
			// The dump goes on: the backup fails on the manifest.
			_, _ = io.Copy(io.Discard, pr)
		}
		parsed <- rdbResult{m, err}
	}()
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("taking an RDB snapshot of %s (SYNC)", p.Target.Engine),
		map[string]any{"server_version": res.ToolVersion})
	return &dumpSource{ext: "rdb",
		dump: func(ctx context.Context, w io.Writer) error {
			err := redisSync(ctx, p.Target, password, io.MultiWriter(w, pw))
			pw.CloseWithError(err)
			return err
		},
		manifest: func(ctx context.Context) (agentproto.BackupManifest, error) {
			select {
			case r := <-parsed:
				return r.m, r.err
			case <-ctx.Done():
				return agentproto.BackupManifest{}, ctx.Err()
			}
		},
		close: func() error { pw.CloseWithError(errUploadEnded); return nil },
	}, nil
}

type rdbResult struct {
	m   agentproto.BackupManifest
	err error
}

// redisSync writes the server's RDB snapshot to w, read through the
// replication protocol.
func redisSync(ctx context.Context, t agentproto.DBTarget, password string, w io.Writer) error {
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

// kvTally counts keys as the manifest does.
type kvTally struct {
	dbs   map[int]*agentproto.BackupTable
	sums  map[int]uint64
	types map[string]int64
}

func newKVTally() *kvTally {
	return &kvTally{dbs: map[int]*agentproto.BackupTable{}, sums: map[int]uint64{}, types: map[string]int64{}}
}

// add counts a key of a type in db: the database's checksum is the sum
// (mod 2^64) of the first 64 bits of MD5(type ":" key).
func (t *kvTally) add(db int, typ string, key []byte) {
	tb := t.dbs[db]
	if tb == nil {
		tb = &agentproto.BackupTable{Name: "db" + strconv.Itoa(db)}
		t.dbs[db] = tb
	}
	tb.Rows++
	h := md5.New()
	h.Write([]byte(typ + ":"))
	h.Write(key)
	t.sums[db] += byteorder.BigEndian.Uint64(h.Sum(nil)[:8])
	t.types[typ]++
}

func (t *kvTally) manifest() agentproto.BackupManifest {
	m := agentproto.BackupManifest{Kind: agentproto.BackupManifestKV, Tables: []agentproto.BackupTable{}, Keys: t.types}
	var dbs []int
	for db := range t.dbs {
		dbs = append(dbs, db)
	}
	sort.Ints(dbs)
	for _, db := range dbs {
		tb := *t.dbs[db]
		tb.Checksum = strconv.FormatUint(t.sums[db], 10)
		m.Tables = append(m.Tables, tb)
	}
	return m
}

// RDB opcodes and value types (Redis 7.2's rdb.h).
const (
	rdbOpFunction2    = 0xF5
	rdbOpFunction     = 0xF6
	rdbOpModuleAux    = 0xF7
	rdbOpIdle         = 0xF8
	rdbOpFreq         = 0xF9
	rdbOpAux          = 0xFA
	rdbOpResizeDB     = 0xFB
	rdbOpExpireTimeMS = 0xFC
	rdbOpExpireTime   = 0xFD
	rdbOpSelectDB     = 0xFE
	rdbOpEOF          = 0xFF
)

// rdbTypes names the value types Redis reports with TYPE.
var rdbTypes = map[byte]string{0: "string", 1: "list", 2: "set", 3: "zset", 4: "hash", 5: "zset", 9: "hash", 10: "list", 11: "set",
	12: "zset", 13: "hash", 14: "list", 15: "stream", 16: "hash", 17: "zset", 18: "list", 19: "stream", 20: "set", 21: "stream"}

// errRDB is an RDB file this agent cannot read.
var errRDB = errors.New("rdb")

// parseRDB reads an RDB snapshot and counts its keys.
func parseRDB(r *bufio.Reader) (agentproto.BackupManifest, error) {
	p := &rdbReader{r: r}
	head := make([]byte, 9)
	if _, err := io.ReadFull(r, head); err != nil {
		return agentproto.BackupManifest{}, fmt.Errorf("%w: %v", errRDB, err)
	}
	if string(head[:5]) != "REDIS" {
		return agentproto.BackupManifest{}, fmt.Errorf("%w: not an RDB snapshot", errRDB)
	}
	t := newKVTally()
	db := 0
	for {
		op, err := r.ReadByte()
		if err != nil {
			return agentproto.BackupManifest{}, fmt.Errorf("%w: %v", errRDB, err)
		}
		switch op {
		case rdbOpEOF:
			return t.manifest(), nil
		case rdbOpSelectDB:
			n, err := p.length()
			if err != nil {
				return agentproto.BackupManifest{}, err
			}
			db = int(n)
		case rdbOpResizeDB:
			if _, err = p.length(); err == nil {
				_, err = p.length()
			}
		case rdbOpAux:
			if err := p.skipStrings(2); err != nil {
				return agentproto.BackupManifest{}, err
			}
		case rdbOpExpireTimeMS:
			err = p.skip(8)
		case rdbOpExpireTime:
			err = p.skip(4)
		case rdbOpIdle:
			_, err = p.length()
		case rdbOpFreq:
			err = p.skip(1)
		case rdbOpFunction2:
			err = p.skipStrings(1)
		case rdbOpFunction, rdbOpModuleAux:
			return agentproto.BackupManifest{}, fmt.Errorf("%w: opcode %#x (modules or pre-release functions) is not supported", errRDB, op)
		default:
			typ, ok := rdbTypes[op]
			if !ok {
				return agentproto.BackupManifest{}, fmt.Errorf("%w: value type %d is not supported", errRDB, op)
			}
			key, err := p.str()
			if err != nil {
				return agentproto.BackupManifest{}, err
			}
			if err := p.skipValue(op); err != nil {
				return agentproto.BackupManifest{}, err
			}
			t.add(db, typ, key)
		}
		if err != nil {
			return agentproto.BackupManifest{}, err
		}
	}
}

type rdbReader struct{ r *bufio.Reader }

func (p *rdbReader) skip(n int64) error {
	_, err := p.r.Discard(int(n))
	if err != nil {
		return fmt.Errorf("%w: %v", errRDB, err)
	}
	return nil
}

// lengthOrEnc reads a length; enc says it is a special string encoding
// (an integer or LZF) whose kind is n.
func (p *rdbReader) lengthOrEnc() (n uint64, enc bool, err error) {
	b, err := p.r.ReadByte()
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", errRDB, err)
	}
	switch b >> 6 {
	case 0:
		return uint64(b & 0x3F), false, nil
	case 1:
		b2, err := p.r.ReadByte()
		if err != nil {
			return 0, false, fmt.Errorf("%w: %v", errRDB, err)
		}
		return uint64(b&0x3F)<<8 | uint64(b2), false, nil
	case 2:
		var buf [8]byte
		switch b {
		case 0x80:
			if _, err := io.ReadFull(p.r, buf[:4]); err != nil {
				return 0, false, fmt.Errorf("%w: %v", errRDB, err)
			}
			return uint64(byteorder.BigEndian.Uint32(buf[:4])), false, nil
		case 0x81:
			if _, err := io.ReadFull(p.r, buf[:]); err != nil {
				return 0, false, fmt.Errorf("%w: %v", errRDB, err)
			}
			return byteorder.BigEndian.Uint64(buf[:]), false, nil
		}
		return 0, false, fmt.Errorf("%w: length byte %#x", errRDB, b)
	}
	return uint64(b & 0x3F), true, nil
}

func (p *rdbReader) length() (uint64, error) {
	n, enc, err := p.lengthOrEnc()
	if err == nil && enc {
		err = fmt.Errorf("%w: an encoded string where a length belongs", errRDB)
	}
	return n, err
}

// maxRDBString bounds a string the parser keeps in memory (keys); values
// are skipped without being kept.
const maxRDBString = 512 << 20

// str reads a string (keys are kept whole).
func (p *rdbReader) str() ([]byte, error) {
	n, enc, err := p.lengthOrEnc()
	if err != nil {
		return nil, err
	}
	if enc {
		switch n {
		case 0:
			b, err := p.r.ReadByte()
			return []byte(strconv.Itoa(int(int8(b)))), wrapRDB(err)
		case 1:
			var buf [2]byte
			_, err := io.ReadFull(p.r, buf[:])
			return []byte(strconv.Itoa(int(int16(byteorder.LittleEndian.Uint16(buf[:]))))), wrapRDB(err)
		case 2:
			var buf [4]byte
			_, err := io.ReadFull(p.r, buf[:])
			return []byte(strconv.Itoa(int(int32(byteorder.LittleEndian.Uint32(buf[:]))))), wrapRDB(err)
		case 3:
			clen, err := p.length()
			if err != nil {
				return nil, err
			}
			ulen, err := p.length()
			if err != nil {
				return nil, err
			}
			if clen > maxRDBString || ulen > maxRDBString {
				return nil, fmt.Errorf("%w: a compressed string of %d bytes", errRDB, ulen)
			}
			in := make([]byte, clen)
			if _, err := io.ReadFull(p.r, in); err != nil {
				return nil, wrapRDB(err)
			}
			return lzfDecompress(in, int(ulen))
		}
		return nil, fmt.Errorf("%w: string encoding %d", errRDB, n)
	}
	if n > maxRDBString {
		return nil, fmt.Errorf("%w: a string of %d bytes", errRDB, n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(p.r, b)
	return b, wrapRDB(err)
}

// skipStr passes over a string without keeping it.
func (p *rdbReader) skipStr() error {
	n, enc, err := p.lengthOrEnc()
	if err != nil {
		return err
	}
	if !enc {
		return p.skip(int64(n))
	}
	switch n {
	case 0:
		return p.skip(1)
	case 1:
		return p.skip(2)
	case 2:
		return p.skip(4)
	case 3:
		clen, err := p.length()
		if err == nil {
			_, err = p.length()
		}
		if err != nil {
			return err
		}
		return p.skip(int64(clen))
	}
	return fmt.Errorf("%w: string encoding %d", errRDB, n)
}

func (p *rdbReader) skipStrings(n uint64) error {
	for range n {
		if err := p.skipStr(); err != nil {
			return err
		}
	}
	return nil
}

func (p *rdbReader) skipLengths(n int) error {
	for range n {
		if _, err := p.length(); err != nil {
			return err
		}
	}
	return nil
}

// skipValue passes over a value of type typ.
func (p *rdbReader) skipValue(typ byte) error {
	switch typ {
	case 0, 9, 10, 11, 12, 13, 16, 17, 20: // a string, or one encoded blob
		return p.skipStr()
	case 1, 2, 14: // list, set, quicklist of ziplists
		n, err := p.length()
		if err != nil {
			return err
		}
		return p.skipStrings(n)
	case 4: // hash: field and value
		n, err := p.length()
		if err != nil {
			return err
		}
		return p.skipStrings(2 * n)
	case 3: // zset: member and a double as text
		n, err := p.length()
		if err != nil {
			return err
		}
		for range n {
			if err := p.skipStr(); err != nil {
				return err
			}
			l, err := p.r.ReadByte()
			if err != nil {
				return wrapRDB(err)
			}
			if l < 253 {
				if err := p.skip(int64(l)); err != nil {
					return err
				}
			}
		}
		return nil
	case 5: // zset: member and a binary double
		n, err := p.length()
		if err != nil {
			return err
		}
		for range n {
			if err := p.skipStr(); err != nil {
				return err
			}
			if err := p.skip(8); err != nil {
				return err
			}
		}
		return nil
	case 18: // quicklist of listpacks: container kind and listpack
		n, err := p.length()
		if err != nil {
			return err
		}
		for range n {
			if _, err := p.length(); err != nil {
				return err
			}
			if err := p.skipStr(); err != nil {
				return err
			}
		}
		return nil
	case 15, 19, 21:
		return p.skipStream(typ)
	}
	return fmt.Errorf("%w: value type %d is not supported", errRDB, typ)
}

// skipStream passes over a stream (rdb.c's rdbLoadObject for streams).
func (p *rdbReader) skipStream(typ byte) error {
	n, err := p.length() // listpacks: node key and listpack
	if err != nil {
		return err
	}
	if err := p.skipStrings(2 * n); err != nil {
		return err
	}
	// length, last id; for v2 and later: first id, max deleted id,
	// entries added.
	lengths := 3
	if typ >= 19 {
		lengths += 5
	}
	if err := p.skipLengths(lengths); err != nil {
		return err
	}
	groups, err := p.length()
	if err != nil {
		return err
	}
	for range groups {
		if err := p.skipStr(); err != nil { // name
			return err
		}
		last := 2
		if typ >= 19 {
			last++ // entries read
		}
		if err := p.skipLengths(last); err != nil {
			return err
		}
		pel, err := p.length()
		if err != nil {
			return err
		}
		for range pel { // id, delivery time, delivery count
			if err := p.skip(16 + 8); err != nil {
				return err
			}
			if _, err := p.length(); err != nil {
				return err
			}
		}
		consumers, err := p.length()
		if err != nil {
			return err
		}
		for range consumers {
			if err := p.skipStr(); err != nil { // name
				return err
			}
			times := int64(8) // seen time
			if typ >= 21 {
				times += 8 // active time
			}
			if err := p.skip(times); err != nil {
				return err
			}
			cpel, err := p.length()
			if err != nil {
				return err
			}
			if err := p.skip(int64(cpel) * 16); err != nil {
				return err
			}
		}
	}
	return nil
}

func wrapRDB(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", errRDB, err)
}

// lzfDecompress expands LZF data (liblzf's format) of ulen bytes.
func lzfDecompress(in []byte, ulen int) ([]byte, error) {
	out := make([]byte, 0, ulen)
	for i := 0; i < len(in); {
		ctrl := int(in[i])
		i++
		if ctrl < 32 { // a literal run of ctrl+1 bytes
			n := ctrl + 1
			if i+n > len(in) || len(out)+n > ulen {
				return nil, fmt.Errorf("%w: bad LZF data", errRDB)
			}
			out = append(out, in[i:i+n]...)
			i += n
			continue
		}
		n := ctrl >> 5
		if n == 7 {
			if i >= len(in) {
				return nil, fmt.Errorf("%w: bad LZF data", errRDB)
			}
			n += int(in[i])
			i++
		}
		if i >= len(in) {
			return nil, fmt.Errorf("%w: bad LZF data", errRDB)
		}
		ref := len(out) - (ctrl&0x1f)<<8 - int(in[i]) - 1
		i++
		n += 2
		if ref < 0 || len(out)+n > ulen {
			return nil, fmt.Errorf("%w: bad LZF data", errRDB)
		}
		for k := range n {
			out = append(out, out[ref+k])
		}
	}
	if len(out) != ulen {
		return nil, fmt.Errorf("%w: LZF data of %d bytes, want %d", errRDB, len(out), ulen)
	}
	return out, nil
}

// redisManifest counts the keys of a running server as parseRDB does.
func redisManifest(ctx context.Context, addr string) (agentproto.BackupManifest, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	info, err := c.Info(ctx, "keyspace").Result()
	if err != nil {
		return agentproto.BackupManifest{}, err
	}
	t := newKVTally()
	for db := range parseInfo(info)["keyspace"] {
		n, err := strconv.Atoi(strings.TrimPrefix(db, "db"))
		if err != nil {
			continue
		}
		if err := tallyDB(ctx, c, n, t); err != nil {
			return agentproto.BackupManifest{}, fmt.Errorf("db%d: %w", n, err)
		}
	}
	return t.manifest(), nil
}

func tallyDB(ctx context.Context, c *redis.Client, db int, t *kvTally) error {
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
			t.add(db, types[i].Val(), []byte(k))
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// verifyKV loads a Redis/Valkey backup into a throwaway server and
// compares its keys with the manifest.
func (b *Backups) verifyKV(ctx context.Context, p agentproto.BackupRestorePayload, secrets map[string]string, events agent.EventSink,
	res *agentproto.BackupVerifyResult) (agentproto.BackupVerifyResult, error) {
	srv, err := b.kvServer(ctx, p)
	if err != nil {
		return b.failed(res, err)
	}
	err = b.loadThrowawayKV(ctx, srv, p, secrets, events, res, func(addr string) {
		res.Database = "a throwaway " + p.Target.Engine + " on " + addr
	}, nil)
	if err != nil {
		return b.failed(res, err)
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("loaded the snapshot into %s %s and matched the manifest's %d databases",
		p.Target.Engine, res.EngineVersion, len(res.Tables)), nil)
	return *res, nil
}

// snapshotTee is how a caller of loadThrowawayKV sees the snapshot the
// throwaway server loads: given the snapshot's plaintext as it is
// decrypted, it returns the reader the server loads from instead, and a
// function that finishes its own work once the server has read it, given
// the outcome of that read (nil: the whole snapshot was read); an error
// of finish fails the load.
type snapshotTee func(snapshot io.Reader) (through io.Reader, finish func(readErr error) error)

// loadThrowawayKV fetches a Redis/Valkey backup's object, loads its
// snapshot as the data of the throwaway server srv (kvServer) on a free
// loopback port, waits until the server loaded it, and compares what it
// holds with the manifest: per database (fetchLoadCompare) and per key
// type; res says what it loaded into. The server is removed before it
// returns. started, when not nil, learns the server's address before it
// starts; tee, when not nil, sees the snapshot on its way (snapshotTee).
// Verification and in-place restore both load a snapshot this way.
func (b *Backups) loadThrowawayKV(ctx context.Context, srv throwawayKV, p agentproto.BackupRestorePayload, secrets map[string]string,
	events agent.EventSink, res *agentproto.BackupVerifyResult, started func(addr string), tee snapshotTee) error {
	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if started != nil {
		started(addr)
	}
	srv.describe(res)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		srv.remove(rctx)
	}()
	err = b.fetchLoadCompare(ctx, p, secrets, events, res,
		func(object io.Reader, identity *age.X25519Identity) error {
			plain, check, err := plaintext(object, identity)
			if err != nil {
				return err
			}
			events.Emit(agentproto.LevelInfo, fmt.Sprintf("loading the snapshot into a throwaway %s on %s, %s", p.Target.Engine, addr, srv),
				map[string]any{"loader": res.Loader, "loader_version": res.LoaderVersion})
			src, finish := io.Reader(plain), func(error) error { return nil }
			if tee != nil {
				src, finish = tee(plain)
			}
			err = srv.start(ctx, port, src)
			ferr := finish(err)
			// A broken object explains the rest: it is said first.
			if cerr := check(); cerr != nil {
				return cerr
			}
			if ferr != nil {
				return ferr
			}
			if err != nil {
				return err
			}
			res.EngineVersion, err = waitLoaded(ctx, srv, addr)
			return err
		},
		func(ctx context.Context) (agentproto.BackupManifest, error) { return redisManifest(ctx, addr) })
	if err != nil {
		return err
	}
	return compareKeyTypes(p.Manifest, ctx, addr, res)
}

// compareKeyTypes checks the loaded keys of each type against the
// manifest's counts (the per-database counts and checksums were compared
// already).
func compareKeyTypes(want agentproto.BackupManifest, ctx context.Context, addr string, res *agentproto.BackupVerifyResult) error {
	got, err := redisManifest(ctx, addr)
	if err != nil {
		return err
	}
	for typ, n := range want.Keys {
		if got.Keys[typ] != n {
			res.OK = false
			return fmt.Errorf("the snapshot loaded %d keys of type %s, the manifest counted %d", got.Keys[typ], typ, n)
		}
	}
	return nil
}

// startThrowawayRedis starts redis-server in a container of the engine's
// image on the host's loopback port, with the snapshot read from its
// standard input as its data, and returns the container's id.
func startThrowawayRedis(ctx context.Context, cli *client.Client, p agentproto.BackupRestorePayload, port int, rdb io.Reader) (string, error) {
	server := "redis-server"
	if p.Target.Engine == agentproto.EngineValkey {
		server = "valkey-server"
	}
	script := fmt.Sprintf("cat >/tmp/capstan.rdb && exec %s --port %d --bind 127.0.0.1 --dir /tmp --dbfilename capstan.rdb "+
		"--save '' --appendonly no", server, port)
	cfg := &container.Config{Image: p.Source.Image, Entrypoint: []string{"sh", "-c", script}, User: "65534:65534",
		AttachStdin: true, OpenStdin: true, StdinOnce: true, AttachStdout: true, AttachStderr: true,
		Labels: map[string]string{agentproto.LabelDBInstance: p.Target.InstanceID, labelDBTool: server}}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg,
		HostConfig: &container.HostConfig{NetworkMode: "host"}})
	if err != nil {
		return "", fmt.Errorf("creating a container of %s: %w", p.Source.Image, err)
	}
	att, err := cli.ContainerAttach(ctx, created.ID, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		return created.ID, fmt.Errorf("attaching to the %s container: %w", server, err)
	}
	defer att.Close()
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return created.ID, fmt.Errorf("starting the %s container: %w", server, err)
	}
	if _, err := io.Copy(att.Conn, rdb); err != nil {
		return created.ID, fmt.Errorf("writing the snapshot into the container: %w", err)
	}
	return created.ID, att.CloseWrite()
}

// waitLoaded waits until the throwaway server srv answers with its data
// loaded, and returns its version as it reports it; it fails with the
// server's output when it exited.
func waitLoaded(ctx context.Context, srv throwawayKV, addr string) (string, error) {
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
		exited, out, ierr := srv.exited(ctx)
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

// containerLogTail is the end of a container's output.
func containerLogTail(ctx context.Context, cli *client.Client, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	out := newTail(4 << 10)
	_, _ = stdcopy.StdCopy(out, out, rc)
	return strings.TrimSpace(out.String())
}

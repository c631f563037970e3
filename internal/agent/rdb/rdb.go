// Package rdb reads Redis and Valkey RDB snapshots (the format of
// Redis 7.2's rdb.h, and Valkey's) as a backup streams through the agent,
// and counts their keys for the backup's manifest: per database the
// number of keys and a checksum of their names and types, and the keys of
// each type. It reads only; it imports nothing of the agent.
package rdb

import (
	"bufio"
	"bytes"
	"crypto/md5"
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Tally counts keys as a backup's manifest does, whether they are read
// from a snapshot (Parse) or from a running server.
type Tally struct {
	dbs   map[int]*agentproto.BackupTable
	sums  map[int]uint64
	types map[string]int64
}

// NewTally is a tally of no keys.
func NewTally() *Tally {
	return &Tally{dbs: map[int]*agentproto.BackupTable{}, sums: map[int]uint64{}, types: map[string]int64{}}
}

// Add counts a key of a type in db: the database's checksum is the sum
// (mod 2^64) of the first 64 bits of MD5(type ":" key).
func (t *Tally) Add(db int, typ string, key []byte) {
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

// Manifest is what the tally counted, as a backup's manifest.
func (t *Tally) Manifest() agentproto.BackupManifest {
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
	opFunction2    = 0xF5
	opFunction     = 0xF6
	opModuleAux    = 0xF7
	opIdle         = 0xF8
	opFreq         = 0xF9
	opAux          = 0xFA
	opResizeDB     = 0xFB
	opExpireTimeMS = 0xFC
	opExpireTime   = 0xFD
	opSelectDB     = 0xFE
	opEOF          = 0xFF
)

// valueTypes names the value types Redis reports with TYPE.
var valueTypes = map[byte]string{0: "string", 1: "list", 2: "set", 3: "zset", 4: "hash", 5: "zset", 9: "hash", 10: "list", 11: "set",
	12: "zset", 13: "hash", 14: "list", 15: "stream", 16: "hash", 17: "zset", 18: "list", 19: "stream", 20: "set", 21: "stream"}

// ErrUnreadable is an RDB file this reader cannot read: not a snapshot,
// truncated, or holding what it does not know (modules).
var ErrUnreadable = errors.New("rdb")

// Parse reads an RDB snapshot to its end and counts its keys. It holds
// at most one string of the snapshot in memory at a time (512 MiB at
// most) and skips every value.
func Parse(r *bufio.Reader) (agentproto.BackupManifest, error) {
	p := &reader{r: r}
	head := make([]byte, 9)
	if _, err := io.ReadFull(r, head); err != nil {
		return agentproto.BackupManifest{}, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	if string(head[:5]) != "REDIS" {
		return agentproto.BackupManifest{}, fmt.Errorf("%w: not an RDB snapshot", ErrUnreadable)
	}
	t := NewTally()
	db := 0
	for {
		op, err := r.ReadByte()
		if err != nil {
			return agentproto.BackupManifest{}, fmt.Errorf("%w: %v", ErrUnreadable, err)
		}
		switch op {
		case opEOF:
			return t.Manifest(), nil
		case opSelectDB:
			n, err := p.length()
			if err != nil {
				return agentproto.BackupManifest{}, err
			}
			db = int(n)
		case opResizeDB:
			if _, err = p.length(); err == nil {
				_, err = p.length()
			}
		case opAux:
			if err := p.skipStrings(2); err != nil {
				return agentproto.BackupManifest{}, err
			}
		case opExpireTimeMS:
			err = p.skip(8)
		case opExpireTime:
			err = p.skip(4)
		case opIdle:
			_, err = p.length()
		case opFreq:
			err = p.skip(1)
		case opFunction2:
			err = p.skipStrings(1)
		case opFunction, opModuleAux:
			return agentproto.BackupManifest{}, fmt.Errorf("%w: opcode %#x (modules or pre-release functions) is not supported", ErrUnreadable, op)
		default:
			typ, ok := valueTypes[op]
			if !ok {
				return agentproto.BackupManifest{}, fmt.Errorf("%w: value type %d is not supported", ErrUnreadable, op)
			}
			key, err := p.str()
			if err != nil {
				return agentproto.BackupManifest{}, err
			}
			if err := p.skipValue(op); err != nil {
				return agentproto.BackupManifest{}, err
			}
			t.Add(db, typ, key)
		}
		if err != nil {
			return agentproto.BackupManifest{}, err
		}
	}
}

type reader struct{ r *bufio.Reader }

func (p *reader) skip(n int64) error {
	_, err := p.r.Discard(int(n))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	return nil
}

// lengthOrEnc reads a length; enc says it is a special string encoding
// (an integer or LZF) whose kind is n.
func (p *reader) lengthOrEnc() (n uint64, enc bool, err error) {
	b, err := p.r.ReadByte()
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	switch b >> 6 {
	case 0:
		return uint64(b & 0x3F), false, nil
	case 1:
		b2, err := p.r.ReadByte()
		if err != nil {
			return 0, false, fmt.Errorf("%w: %v", ErrUnreadable, err)
		}
		return uint64(b&0x3F)<<8 | uint64(b2), false, nil
	case 2:
		var buf [8]byte
		switch b {
		case 0x80:
			if _, err := io.ReadFull(p.r, buf[:4]); err != nil {
				return 0, false, fmt.Errorf("%w: %v", ErrUnreadable, err)
			}
			return uint64(byteorder.BigEndian.Uint32(buf[:4])), false, nil
		case 0x81:
			if _, err := io.ReadFull(p.r, buf[:]); err != nil {
				return 0, false, fmt.Errorf("%w: %v", ErrUnreadable, err)
			}
			return byteorder.BigEndian.Uint64(buf[:]), false, nil
		}
		return 0, false, fmt.Errorf("%w: length byte %#x", ErrUnreadable, b)
	}
	return uint64(b & 0x3F), true, nil
}

func (p *reader) length() (uint64, error) {
	n, enc, err := p.lengthOrEnc()
	if err == nil && enc {
		err = fmt.Errorf("%w: an encoded string where a length belongs", ErrUnreadable)
	}
	return n, err
}

// maxString bounds a string the parser keeps in memory (keys); values
// are skipped without being kept.
const maxString = 512 << 20

// str reads a string (keys are kept whole).
func (p *reader) str() ([]byte, error) {
	n, enc, err := p.lengthOrEnc()
	if err != nil {
		return nil, err
	}
	if enc {
		switch n {
		case 0:
			b, err := p.r.ReadByte()
			return []byte(strconv.Itoa(int(int8(b)))), wrap(err)
		case 1:
			var buf [2]byte
			_, err := io.ReadFull(p.r, buf[:])
			return []byte(strconv.Itoa(int(int16(byteorder.LittleEndian.Uint16(buf[:]))))), wrap(err)
		case 2:
			var buf [4]byte
			_, err := io.ReadFull(p.r, buf[:])
			return []byte(strconv.Itoa(int(int32(byteorder.LittleEndian.Uint32(buf[:]))))), wrap(err)
		case 3:
			clen, err := p.length()
			if err != nil {
				return nil, err
			}
			ulen, err := p.length()
			if err != nil {
				return nil, err
			}
			if clen > maxString || ulen > maxString {
				return nil, fmt.Errorf("%w: a compressed string of %d bytes", ErrUnreadable, ulen)
			}
			in, err := p.bytes(clen)
			if err != nil {
				return nil, err
			}
			return lzfDecompress(in, int(ulen))
		}
		return nil, fmt.Errorf("%w: string encoding %d", ErrUnreadable, n)
	}
	if n > maxString {
		return nil, fmt.Errorf("%w: a string of %d bytes", ErrUnreadable, n)
	}
	return p.bytes(n)
}

// bytes reads the next n bytes. Memory grows with what arrives, not with
// the length a damaged snapshot claims.
func (p *reader) bytes(n uint64) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(min(n, 64<<10)))
	if _, err := io.CopyN(&b, p.r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, wrap(err)
	}
	return b.Bytes(), nil
}

// skipStr passes over a string without keeping it.
func (p *reader) skipStr() error {
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
	return fmt.Errorf("%w: string encoding %d", ErrUnreadable, n)
}

func (p *reader) skipStrings(n uint64) error {
	for range n {
		if err := p.skipStr(); err != nil {
			return err
		}
	}
	return nil
}

func (p *reader) skipLengths(n int) error {
	for range n {
		if _, err := p.length(); err != nil {
			return err
		}
	}
	return nil
}

// skipValue passes over a value of type typ.
func (p *reader) skipValue(typ byte) error {
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
				return wrap(err)
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
	return fmt.Errorf("%w: value type %d is not supported", ErrUnreadable, typ)
}

// skipStream passes over a stream (rdb.c's rdbLoadObject for streams).
func (p *reader) skipStream(typ byte) error {
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

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrUnreadable, err)
}

// lzfDecompress expands LZF data (liblzf's format) of ulen bytes.
func lzfDecompress(in []byte, ulen int) ([]byte, error) {
	out := make([]byte, 0, min(ulen, 64<<10)) // grows with what the data expands to
	for i := 0; i < len(in); {
		ctrl := int(in[i])
		i++
		if ctrl < 32 { // a literal run of ctrl+1 bytes
			n := ctrl + 1
			if i+n > len(in) || len(out)+n > ulen {
				return nil, fmt.Errorf("%w: bad LZF data", ErrUnreadable)
			}
			out = append(out, in[i:i+n]...)
			i += n
			continue
		}
		n := ctrl >> 5
		if n == 7 {
			if i >= len(in) {
				return nil, fmt.Errorf("%w: bad LZF data", ErrUnreadable)
			}
			n += int(in[i])
			i++
		}
		if i >= len(in) {
			return nil, fmt.Errorf("%w: bad LZF data", ErrUnreadable)
		}
		ref := len(out) - (ctrl&0x1f)<<8 - int(in[i]) - 1
		i++
		n += 2
		if ref < 0 || len(out)+n > ulen {
			return nil, fmt.Errorf("%w: bad LZF data", ErrUnreadable)
		}
		for k := range n {
			out = append(out, out[ref+k])
		}
	}
	if len(out) != ulen {
		return nil, fmt.Errorf("%w: LZF data of %d bytes, want %d", ErrUnreadable, len(out), ulen)
	}
	return out, nil
}

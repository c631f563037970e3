package database

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// rdbString is a plain length-prefixed RDB string (under 64 bytes).
func rdbString(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// TestParseRDB reads a hand-made snapshot with an LZF-compressed key,
// integer-encoded keys, an expiry, two databases and values of several
// encodings, and counts the keys as a scan of the loaded data would; a
// module value is refused.
func TestParseRDB(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("REDIS0010")
	b.WriteByte(rdbOpAux)
	b.Write(rdbString("redis-ver"))
	b.Write(rdbString("7.0.15"))
	b.Write([]byte{rdbOpSelectDB, 0, rdbOpResizeDB, 4, 1})
	// A string whose key is LZF-compressed: "abcabcabc".
	b.WriteByte(0)
	b.Write([]byte{0xC3, 6, 9, 2, 'a', 'b', 'c', 0x80, 2})
	b.Write(rdbString("v"))
	// An expiring string whose key is the integer 42 (int8 encoding).
	b.Write([]byte{rdbOpExpireTimeMS, 1, 2, 3, 4, 5, 6, 7, 8})
	b.Write([]byte{0, 0xC0, 42})
	b.Write(rdbString("soon"))
	// A hash as one listpack blob.
	b.WriteByte(16)
	b.Write(rdbString("h"))
	b.Write(rdbString("listpack bytes"))
	// A sorted set with binary doubles.
	b.WriteByte(5)
	b.Write(rdbString("z"))
	b.WriteByte(2)
	b.Write(rdbString("a"))
	b.Write(make([]byte, 8))
	b.Write(rdbString("b"))
	b.Write(make([]byte, 8))
	b.Write([]byte{rdbOpSelectDB, 3})
	// A quicklist of listpacks.
	b.WriteByte(18)
	b.Write(rdbString("l"))
	b.Write([]byte{1, 2})
	b.Write(rdbString("listpack"))
	b.WriteByte(rdbOpEOF)
	b.Write(make([]byte, 8))

	got, err := parseRDB(bufio.NewReader(bytes.NewReader(b.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	want := newKVTally()
	want.add(0, "string", []byte("abcabcabc"))
	want.add(0, "string", []byte("42"))
	want.add(0, "hash", []byte("h"))
	want.add(0, "zset", []byte("z"))
	want.add(3, "list", []byte("l"))
	w := want.manifest()
	if len(got.Tables) != 2 || got.Tables[0] != w.Tables[0] || got.Tables[1] != w.Tables[1] || got.Kind != "kv" {
		t.Fatalf("tables: %+v, want %+v", got.Tables, w.Tables)
	}
	for typ, n := range map[string]int64{"string": 2, "hash": 1, "zset": 1, "list": 1} {
		if got.Keys[typ] != n {
			t.Errorf("%s keys: %d, want %d", typ, got.Keys[typ], n)
		}
	}

	module := append([]byte("REDIS0010"), rdbOpSelectDB, 0, 7)
	module = append(module, rdbString("m")...)
	if _, err := parseRDB(bufio.NewReader(bytes.NewReader(module))); !errors.Is(err, errRDB) {
		t.Fatalf("a module value: %v", err)
	}
}

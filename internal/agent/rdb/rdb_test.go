package rdb

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// str is a plain length-prefixed RDB string (under 64 bytes).
func str(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// sample is a hand-made snapshot with an LZF-compressed key,
// integer-encoded keys, an expiry, two databases and values of several
// encodings.
func sample() []byte {
	var b bytes.Buffer
	b.WriteString("REDIS0010")
	b.WriteByte(opAux)
	b.Write(str("redis-ver"))
	b.Write(str("7.0.15"))
	b.Write([]byte{opSelectDB, 0, opResizeDB, 4, 1})
	// A string whose key is LZF-compressed: "abcabcabc".
	b.WriteByte(0)
	b.Write([]byte{0xC3, 6, 9, 2, 'a', 'b', 'c', 0x80, 2})
	b.Write(str("v"))
	// An expiring string whose key is the integer 42 (int8 encoding).
	b.Write([]byte{opExpireTimeMS, 1, 2, 3, 4, 5, 6, 7, 8})
	b.Write([]byte{0, 0xC0, 42})
	b.Write(str("soon"))
	// A hash as one listpack blob.
	b.WriteByte(16)
	b.Write(str("h"))
	b.Write(str("listpack bytes"))
	// A sorted set with binary doubles.
	b.WriteByte(5)
	b.Write(str("z"))
	b.WriteByte(2)
	b.Write(str("a"))
	b.Write(make([]byte, 8))
	b.Write(str("b"))
	b.Write(make([]byte, 8))
	b.Write([]byte{opSelectDB, 3})
	// A quicklist of listpacks.
	b.WriteByte(18)
	b.Write(str("l"))
	b.Write([]byte{1, 2})
	b.Write(str("listpack"))
	b.WriteByte(opEOF)
	b.Write(make([]byte, 8))

	return b.Bytes()
}

// TestParseRDB reads a hand-made snapshot with an LZF-compressed key,
// integer-encoded keys, an expiry, two databases and values of several
// encodings, and counts the keys as a scan of the loaded data would; a
// module value is refused.
func TestParse(t *testing.T) {
	got, err := Parse(bufio.NewReader(bytes.NewReader(sample())))
	if err != nil {
		t.Fatal(err)
	}
	want := NewTally()
	want.Add(0, "string", []byte("abcabcabc"))
	want.Add(0, "string", []byte("42"))
	want.Add(0, "hash", []byte("h"))
	want.Add(0, "zset", []byte("z"))
	want.Add(3, "list", []byte("l"))
	w := want.Manifest()
	if len(got.Tables) != 2 || got.Tables[0] != w.Tables[0] || got.Tables[1] != w.Tables[1] || got.Kind != "kv" {
		t.Fatalf("tables: %+v, want %+v", got.Tables, w.Tables)
	}
	for typ, n := range map[string]int64{"string": 2, "hash": 1, "zset": 1, "list": 1} {
		if got.Keys[typ] != n {
			t.Errorf("%s keys: %d, want %d", typ, got.Keys[typ], n)
		}
	}

	module := append([]byte("REDIS0010"), opSelectDB, 0, 7)
	module = append(module, str("m")...)
	if _, err := Parse(bufio.NewReader(bytes.NewReader(module))); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("a module value: %v", err)
	}
}

// FuzzParse: any input either reads as a manifest or fails with
// ErrUnreadable; it never panics, and a length the input claims is never
// allocated before the bytes arrive.
func FuzzParse(f *testing.F) {
	f.Add(sample())
	f.Add([]byte("REDIS0010\xff"))
	f.Add([]byte("REDIS0010\x00\x80\x1f\xff\xff\xff"))     // a 512 MiB key that never comes
	f.Add([]byte("REDIS0010\x00\xc3\x80\x1f\xff\xff\xff")) // a compressed one
	f.Add([]byte("REDIS0010\xfe\x00\x05\x01k\x02\x01a\x00\x00\x00\x00\x00\x00\x00\x00\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Parse(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("an error that is not ErrUnreadable: %v", err)
			}
			return
		}
		var keys int64
		for _, tb := range m.Tables {
			keys += tb.Rows
		}
		var typed int64
		for _, n := range m.Keys {
			typed += n
		}
		if keys != typed {
			t.Fatalf("%d keys in the databases, %d by type", keys, typed)
		}
	})
}

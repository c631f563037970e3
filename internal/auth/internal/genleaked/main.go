// Command genleaked builds the leaked-password filter that auth embeds:
// it reads a gzipped list of leaked passwords, one a line, on standard
// input, keeps those of -min to -max characters (lowercased, as the check
// compares them), and writes on standard output the sorted, distinct
// first four bytes of the SHA-256 of each, four bytes apiece, big-endian.
// scripts/gen-leaked-passwords.sh runs it on the list it fetches.
package main

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"
)

func main() {
	minLen := flag.Int("min", 12, "shortest password kept, in characters")
	maxLen := flag.Int("max", 128, "longest password kept, in characters")
	flag.Parse()
	if err := run(*minLen, *maxLen); err != nil {
		fmt.Fprintln(os.Stderr, "genleaked:", err)
		os.Exit(1)
	}
}

func run(minLen, maxLen int) error {
	zr, err := gzip.NewReader(bufio.NewReader(os.Stdin))
	if err != nil {
		return err
	}
	var prefixes []uint32
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		pw := strings.ToLower(strings.TrimRight(sc.Text(), "\r"))
		if n := utf8.RuneCountInString(pw); !utf8.ValidString(pw) || n < minLen || n > maxLen {
			continue
		}
		h := sha256.Sum256([]byte(pw))
		prefixes = append(prefixes, binary.BigEndian.Uint32(h[:4]))
	}
	if err := sc.Err(); err != nil {
		return err
	}
	slices.Sort(prefixes)
	prefixes = slices.Compact(prefixes)
	out := bufio.NewWriter(os.Stdout)
	for _, p := range prefixes {
		if err := binary.Write(out, binary.BigEndian, p); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "genleaked: %d passwords of %d to %d characters\n", len(prefixes), minLen, maxLen)
	return out.Flush()
}

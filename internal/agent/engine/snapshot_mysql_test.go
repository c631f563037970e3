package engine

import (
	"bytes"
	"strings"
	"testing"
)

// TestSnapshotWatch: the lock of a MySQL/MariaDB backup is released only
// once the dump's output reaches what it writes after starting its
// transaction, wherever the writes split the lines, and not for the
// header it writes before.
func TestSnapshotWatch(t *testing.T) {
	header := "/*M!999999\\- enable the sandbox mode */ \n-- MariaDB dump 10.19  Distrib 10.11.14-MariaDB\n--\n-- Host: 127.0.0.1    Database: shop\n" +
		"-- ------------------------------------------------------\n-- Server version\t10.11.14-MariaDB\n\n" +
		"/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;\n/*!40103 SET TIME_ZONE='+00:00' */;\n" +
		"-- " + strings.Repeat("x", 200) + " Table structure for table `x`\n"
	for _, tc := range []struct {
		name   string
		output string
		seen   bool
	}{
		{"header only", header, false},
		{"first table", header + "\n--\n-- Table structure for table `items`\n--\n", true},
		{"view", header + "-- Temporary table structure for view `v`\n", true},
		{"no tables", header + "/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;\n", true},
		{"marker inside a line", header + "INSERT INTO t VALUES ('-- Table structure for table ');\n", false},
	} {
		for _, size := range []int{1, 3, 7, 47, 48, 49, 4096} {
			var out bytes.Buffer
			seen := 0
			w := &SnapshotWatch{w: &out, seen: func() { seen++ }}
			for p := []byte(tc.output); len(p) > 0; {
				n := min(size, len(p))
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if out.String() != tc.output {
				t.Fatalf("%s: the output was altered", tc.name)
			}
			if got := seen == 1; got != tc.seen || seen > 1 {
				t.Errorf("%s in writes of %d bytes: seen %d times, want %v", tc.name, size, seen, tc.seen)
			}
			w.End()
			if seen != 1 {
				t.Errorf("%s in writes of %d bytes: seen %d times after the end", tc.name, size, seen)
			}
		}
	}
}

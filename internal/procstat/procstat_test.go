package procstat

import (
	"os"
	"strconv"
	"testing"
)

func TestStatusOfThisProcess(t *testing.T) {
	for _, pid := range []string{"self", strconv.Itoa(os.Getpid())} {
		s, err := Status(pid)
		if err != nil {
			t.Fatal(err)
		}
		if s["VmRSS"] <= 0 || s["VmHWM"] < s["VmRSS"] || s["Threads"] < 1 {
			t.Fatalf("status of %s: VmRSS %d KiB, VmHWM %d KiB, Threads %d", pid, s["VmRSS"], s["VmHWM"], s["Threads"])
		}
		if s["RssAnon"]+s["RssFile"]+s["RssShmem"] != s["VmRSS"] {
			t.Fatalf("status of %s: RssAnon %d + RssFile %d + RssShmem %d != VmRSS %d", pid, s["RssAnon"], s["RssFile"], s["RssShmem"], s["VmRSS"])
		}
	}
	if _, err := Status("0"); err == nil {
		t.Fatal("pid 0 read without an error")
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capstan-dev/capstan/internal/procstat"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Capstan supports).
const userHZ = 100

// procSample is a reading of a process's CPU time and memory.
type procSample struct {
	at      time.Time
	cpu     time.Duration // user + system
	rssKB   uint64
	hwmKB   uint64 // peak RSS
	threads int
}

// readProc reads /proc/PID/stat and /proc/PID/status; pid "self" is this
// process.
func readProc(pid string) (procSample, error) {
	s := procSample{at: time.Now()}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return s, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// after the last ')' start with the state (field 3).
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return s, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, errors.New("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return s, err
	}
	s.cpu = time.Duration(utime+stime) * time.Second / userHZ
	st, err := procstat.Status(pid)
	if err != nil {
		return s, err
	}
	s.rssKB, s.hwmKB, s.threads = uint64(st["VmRSS"]), uint64(st["VmHWM"]), int(st["Threads"])
	return s, nil
}

// cpuPercent is the CPU used between two samples, in percent of one core.
func cpuPercent(a, b procSample) float64 {
	wall := b.at.Sub(a.at)
	if wall <= 0 {
		return 0
	}
	return 100 * float64(b.cpu-a.cpu) / float64(wall)
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// cpuTimes are the machine's CPU times from /proc/stat, in USER_HZ ticks
// summed over all CPUs.
type cpuTimes struct {
	total, idle, steal uint64
}

func readCPUTimes() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i >= 8 { // guest time is counted in user time already
			break
		}
		t.total += n
		switch i {
		case 3, 4: // idle, iowait
			t.idle += n
		case 7:
			t.steal += n
		}
	}
	return t, true
}

// MachineCPU is how busy the whole machine was, in percent of all its
// CPUs: Busy includes every process (the control plane, the simulator and
// anything else); Steal is time the hypervisor gave to other machines.
type MachineCPU struct {
	BusyPct  float64 `json:"busy_percent"`
	StealPct float64 `json:"steal_percent"`
}

func machineCPU(a, b cpuTimes) MachineCPU {
	d := float64(b.total - a.total)
	if d <= 0 {
		return MachineCPU{}
	}
	return MachineCPU{BusyPct: 100 * (d - float64(b.idle-a.idle)) / d, StealPct: 100 * float64(b.steal-a.steal) / d}
}

// openFDs counts a process's open file descriptors; -1 if unreadable.
func openFDs(pid string) int {
	d, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		return -1
	}
	return len(d)
}

// fdLimit returns the soft RLIMIT_NOFILE of a process from
// /proc/PID/limits; 0 if unreadable.
func fdLimit(pid string) uint64 {
	b, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(strings.TrimPrefix(line, "Max open files"))
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// raiseFDLimit raises this process's soft RLIMIT_NOFILE to the hard limit
// and reports the result. Each simulated agent holds at least one
// connection, the long poll, so N agents need N+ descriptors.
func raiseFDLimit(need uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, err
		}
	}
	if rl.Cur < need {
		return rl.Cur, fmt.Errorf("open file limit %d is below the %d this run needs; raise the hard limit (ulimit -Hn) or run fewer agents", rl.Cur, need)
	}
	return rl.Cur, nil
}

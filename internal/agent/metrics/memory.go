package metrics

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
)

// memory is what a sample reports of /proc/meminfo, in bytes.
type memory struct {
	total, used, available uint64
	swapTotal, swapUsed    uint64
}

// parseMeminfo reads /proc/meminfo. Used memory is MemTotal − MemAvailable:
// page cache and reclaimable slab are not "used". Kernels older than 3.14
// have no MemAvailable; it is then estimated as MemFree + Buffers + Cached +
// SReclaimable − Shmem.
func parseMeminfo(r io.Reader) (memory, error) {
	var (
		total, free, avail, buffers, cached, reclaimable, shmem, swapTotal, swapFree uint64
		haveAvail                                                                    bool
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "MemTotal":
			dst = &total
		case "MemFree":
			dst = &free
		case "MemAvailable":
			dst, haveAvail = &avail, true
		case "Buffers":
			dst = &buffers
		case "Cached":
			dst = &cached
		case "SReclaimable":
			dst = &reclaimable
		case "Shmem":
			dst = &shmem
		case "SwapTotal":
			dst = &swapTotal
		case "SwapFree":
			dst = &swapFree
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			n *= 1024
		}
		*dst = n
	}
	if err := sc.Err(); err != nil {
		return memory{}, err
	}
	if total == 0 {
		return memory{}, errors.New("/proc/meminfo: no MemTotal")
	}
	if !haveAvail {
		est := free + buffers + cached + reclaimable
		avail = est - min(est, shmem)
	}
	avail = min(avail, total)
	return memory{
		total:     total,
		available: avail,
		used:      total - avail,
		swapTotal: swapTotal,
		swapUsed:  swapTotal - min(swapTotal, swapFree),
	}, nil
}

package metrics

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
)

// String bounds of reports.
const (
	maxMountLen     = 4096 // PATH_MAX
	maxDeviceLen    = 4096
	maxFSTypeLen    = 255
	maxNameLen      = 512
	maxTextLen      = 1024
	maxStateLen     = 64
	maxImageLen     = 1024
	maxLabelKeyLen  = 512
	maxLabelLen     = 16384
	maxAddressLen   = 128
	maxProtocolLen  = 16
	maxContainerLen = 128
)

// maxStored is the largest count the store takes (signed 64-bit columns).
const maxStored = math.MaxInt64

// ValidateSamples checks a metrics report against the clock and returns
// its samples with their derived values. Every problem is reported as a
// field error naming the sample ("samples[3].cpu_percent").
func ValidateSamples(req agentproto.MetricsRequest, now time.Time) ([]Sample, error) {
	var errs fault.Fields
	switch {
	case len(req.Samples) == 0:
		errs.Add("samples", "at least one sample")
		return nil, errs.Err()
	case len(req.Samples) > agentproto.MaxMetricSamples:
		errs.Add("samples", "at most %d samples per report", agentproto.MaxMetricSamples)
		return nil, errs.Err()
	}
	out := make([]Sample, len(req.Samples))
	for i, m := range req.Samples {
		p := fmt.Sprintf("samples[%d].", i)
		switch {
		case m.At.IsZero():
			errs.Add(p+"at", "is required")
		case m.At.Before(now.Add(-MaxSampleAge)):
			errs.Add(p+"at", "is more than %s old", durationText(MaxSampleAge))
		case m.At.After(now.Add(MaxSampleAhead)):
			errs.Add(p+"at", "is more than %s in the future", durationText(MaxSampleAhead))
		}
		percent(&errs, p+"cpu_percent", m.CPUPercent)
		nonNegative(&errs, p+"load1", m.Load1)
		nonNegative(&errs, p+"load5", m.Load5)
		nonNegative(&errs, p+"load15", m.Load15)
		nonNegative(&errs, p+"net_rx_bytes_per_s", m.NetRxBytesPerS)
		nonNegative(&errs, p+"net_tx_bytes_per_s", m.NetTxBytesPerS)
		if bounded(&errs, p+"memory_total", m.MemoryTotal) {
			usedTotal(&errs, p+"memory_used", "memory_total", m.MemoryUsed, m.MemoryTotal)
			usedTotal(&errs, p+"memory_available", "memory_total", m.MemoryAvailable, m.MemoryTotal)
		}
		if bounded(&errs, p+"swap_total", m.SwapTotal) {
			usedTotal(&errs, p+"swap_used", "swap_total", m.SwapUsed, m.SwapTotal)
		}
		bounded(&errs, p+"uptime_seconds", m.UptimeSeconds)
		if len(m.Filesystems) > agentproto.MaxFilesystemsSample {
			errs.Add(p+"filesystems", "at most %d filesystems per sample", agentproto.MaxFilesystemsSample)
		} else {
			for j, fs := range m.Filesystems {
				q := fmt.Sprintf("%sfilesystems[%d].", p, j)
				text(&errs, q+"mount", fs.Mount, 1, maxMountLen)
				text(&errs, q+"device", fs.Device, 0, maxDeviceLen)
				text(&errs, q+"fstype", fs.FSType, 0, maxFSTypeLen)
				if bounded(&errs, q+"bytes_total", fs.BytesTotal) {
					usedTotal(&errs, q+"bytes_used", "bytes_total", fs.BytesUsed, fs.BytesTotal)
				}
				if bounded(&errs, q+"inodes_total", fs.InodesTotal) {
					usedTotal(&errs, q+"inodes_used", "inodes_total", fs.InodesUsed, fs.InodesTotal)
				}
			}
		}
		if len(m.Containers) > agentproto.MaxContainerSamples {
			errs.Add(p+"containers", "at most %d containers per sample", agentproto.MaxContainerSamples)
		} else {
			for j, c := range m.Containers {
				q := fmt.Sprintf("%scontainers[%d].", p, j)
				text(&errs, q+"id", c.ID, 1, maxContainerLen)
				text(&errs, q+"name", c.Name, 0, maxNameLen)
				percent(&errs, q+"cpu_percent", c.CPUPercent)
				bounded(&errs, q+"memory_used", c.MemoryUsed)
				bounded(&errs, q+"memory_limit", c.MemoryLimit)
				nonNegative(&errs, q+"net_rx_bytes_per_s", c.NetRxBytesPerS)
				nonNegative(&errs, q+"net_tx_bytes_per_s", c.NetTxBytesPerS)
			}
		}
		out[i] = Derive(m)
	}
	if err := capped(errs).Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Derive computes the stored percentages of a sample.
func Derive(m agentproto.MetricSample) Sample {
	s := Sample{MetricSample: m}
	s.At = m.At.UTC()
	s.MemoryUsedPercent = ratio(m.MemoryUsed, m.MemoryTotal)
	s.SwapUsedPercent = ratio(m.SwapUsed, m.SwapTotal)
	for _, fs := range m.Filesystems {
		if p := ratio(fs.BytesUsed, fs.BytesTotal); p != nil && (s.DiskUsedPercent == nil || *p > *s.DiskUsedPercent) {
			s.DiskUsedPercent = p
		}
	}
	return s
}

// ratio is used/total in percent, nil when total is 0.
func ratio(used, total uint64) *float64 {
	if total == 0 {
		return nil
	}
	v := math.Min(100, 100*float64(used)/float64(total))
	return &v
}

func finite(errs *fault.Fields, field string, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		errs.Add(field, "must be a finite number")
		return false
	}
	return true
}

func percent(errs *fault.Fields, field string, v float64) {
	if finite(errs, field, v) && (v < 0 || v > 100) {
		errs.Add(field, "must be between 0 and 100")
	}
}

func nonNegative(errs *fault.Fields, field string, v float64) {
	if finite(errs, field, v) && v < 0 {
		errs.Add(field, "must not be negative")
	}
}

// bounded checks that a count fits the store's signed 64-bit columns.
func bounded(errs *fault.Fields, field string, v uint64) bool {
	if v > maxStored {
		errs.Add(field, "is too large")
		return false
	}
	return true
}

func usedTotal(errs *fault.Fields, usedField, totalName string, used, total uint64) {
	if used > total {
		errs.Add(usedField, "must not exceed %s", totalName)
	}
}

// text checks a string's length in bytes and that it is UTF-8. Control
// characters are allowed: mount points and unit descriptions may have
// them, and refusing a whole report for one would lose it.
func text(errs *fault.Fields, field, v string, minLen, maxLen int) {
	switch {
	case len(v) < minLen:
		errs.Add(field, "is required")
	case len(v) > maxLen:
		errs.Add(field, "at most %d bytes", maxLen)
	case !utf8.ValidString(v):
		errs.Add(field, "must be UTF-8")
	}
}

func durationText(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d hours", d/time.Hour)
	default:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
}

// ValidateInventory checks an inventory report against the clock.
func ValidateInventory(req agentproto.InventoryRequest, now time.Time) error {
	var errs fault.Fields
	switch {
	case req.CollectedAt.IsZero():
		errs.Add("collected_at", "is required")
	case req.CollectedAt.Before(now.Add(-MaxSampleAge)):
		errs.Add("collected_at", "is more than %s old", durationText(MaxSampleAge))
	case req.CollectedAt.After(now.Add(MaxSampleAhead)):
		errs.Add("collected_at", "is more than %s in the future", durationText(MaxSampleAhead))
	}
	if len(req.Services) > MaxServices {
		errs.Add("services", "at most %d services", MaxServices)
	} else {
		for i, s := range req.Services {
			p := fmt.Sprintf("services[%d].", i)
			text(&errs, p+"name", s.Name, 1, maxNameLen)
			text(&errs, p+"description", s.Description, 0, maxTextLen)
			text(&errs, p+"load_state", s.LoadState, 0, maxStateLen)
			text(&errs, p+"active_state", s.ActiveState, 0, maxStateLen)
			text(&errs, p+"sub_state", s.SubState, 0, maxStateLen)
			text(&errs, p+"enabled", s.Enabled, 0, maxStateLen)
		}
	}
	if len(req.Containers) > MaxContainers {
		errs.Add("containers", "at most %d containers", MaxContainers)
	} else {
		for i, c := range req.Containers {
			p := fmt.Sprintf("containers[%d].", i)
			text(&errs, p+"id", c.ID, 1, maxContainerLen)
			text(&errs, p+"name", c.Name, 0, maxContainerLen)
			text(&errs, p+"image", c.Image, 0, maxImageLen)
			text(&errs, p+"state", c.State, 0, maxStateLen)
			text(&errs, p+"status", c.Status, 0, maxTextLen)
			if c.RestartCount < 0 {
				errs.Add(p+"restart_count", "must not be negative")
			}
			if len(c.Ports) > MaxContainerPorts {
				errs.Add(p+"ports", "at most %d ports per container", MaxContainerPorts)
			} else {
				for j, cp := range c.Ports {
					q := fmt.Sprintf("%sports[%d].", p, j)
					text(&errs, q+"ip", cp.IP, 0, maxAddressLen)
					port(&errs, q+"host_port", cp.HostPort)
					port(&errs, q+"container_port", cp.ContainerPort)
					text(&errs, q+"protocol", cp.Protocol, 0, maxProtocolLen)
				}
			}
			labels(&errs, p+"labels", c.Labels)
		}
	}
	if len(req.Ports) > MaxPorts {
		errs.Add("ports", "at most %d ports", MaxPorts)
	} else {
		for i, lp := range req.Ports {
			p := fmt.Sprintf("ports[%d].", i)
			text(&errs, p+"protocol", lp.Protocol, 1, maxProtocolLen)
			text(&errs, p+"address", lp.Address, 0, maxAddressLen)
			port(&errs, p+"port", lp.Port)
			text(&errs, p+"process", lp.Process, 0, maxNameLen)
			if lp.PID < 0 {
				errs.Add(p+"pid", "must not be negative")
			}
		}
	}
	if len(req.Images) > MaxImages {
		errs.Add("images", "at most %d images", MaxImages)
	} else {
		for i, im := range req.Images {
			p := fmt.Sprintf("images[%d].", i)
			text(&errs, p+"id", im.ID, 1, maxImageLen)
			if len(im.Tags) > MaxImageTags {
				errs.Add(p+"tags", "at most %d tags per image", MaxImageTags)
			} else {
				for j, tag := range im.Tags {
					text(&errs, fmt.Sprintf("%stags[%d]", p, j), tag, 1, maxImageLen)
				}
			}
			if im.SizeBytes < 0 {
				errs.Add(p+"size_bytes", "must not be negative")
			}
		}
	}
	if len(req.Volumes) > MaxVolumes {
		errs.Add("volumes", "at most %d volumes", MaxVolumes)
	} else {
		for i, v := range req.Volumes {
			p := fmt.Sprintf("volumes[%d].", i)
			text(&errs, p+"name", v.Name, 1, maxNameLen)
			text(&errs, p+"driver", v.Driver, 0, maxNameLen)
			countOrUnknown(&errs, p+"size_bytes", int64(v.SizeBytes))
			countOrUnknown(&errs, p+"containers", int64(v.Containers))
			labels(&errs, p+"labels", v.Labels)
		}
	}
	if len(req.Networks) > MaxNetworks {
		errs.Add("networks", "at most %d networks", MaxNetworks)
	} else {
		for i, n := range req.Networks {
			p := fmt.Sprintf("networks[%d].", i)
			text(&errs, p+"id", n.ID, 1, maxContainerLen)
			text(&errs, p+"name", n.Name, 1, maxNameLen)
			text(&errs, p+"driver", n.Driver, 0, maxNameLen)
			text(&errs, p+"scope", n.Scope, 0, maxStateLen)
			countOrUnknown(&errs, p+"containers", int64(n.Containers))
		}
	}
	return capped(errs).Err()
}

// countOrUnknown checks a count or size that is -1 when unknown.
func countOrUnknown(errs *fault.Fields, field string, v int64) {
	if v < -1 {
		errs.Add(field, "must be -1 (unknown) or more")
	}
}

// labels checks a label map.
func labels(errs *fault.Fields, field string, m map[string]string) {
	if len(m) > MaxLabels {
		errs.Add(field, "at most %d labels", MaxLabels)
		return
	}
	for k, v := range m {
		if len(k) == 0 || len(k) > maxLabelKeyLen || !utf8.ValidString(k) {
			errs.Add(field, "keys must be 1 to %d bytes of UTF-8", maxLabelKeyLen)
		} else if len(v) > maxLabelLen || !utf8.ValidString(v) {
			errs.Add(field+"."+k, "at most %d bytes of UTF-8", maxLabelLen)
		}
	}
}

// maxFieldErrors bounds the field errors of one problem: a report with
// many bad entries would otherwise make a huge reply.
const maxFieldErrors = 100

func capped(errs fault.Fields) fault.Fields {
	if len(errs) > maxFieldErrors {
		return errs[:maxFieldErrors]
	}
	return errs
}

func port(errs *fault.Fields, field string, v int) {
	if v < 0 || v > 65535 {
		errs.Add(field, "must be between 0 and 65535")
	}
}

package agent

import "time"

// SetReportIntervals sets, for tests, the time between metric samples
// (instead of metrics_seconds) and the inventory's check and refresh
// intervals; zero keeps the default.
func SetReportIntervals(o *Options, metrics, inventoryCheck, inventoryRefresh time.Duration) {
	o.metricsInterval, o.inventoryCheck, o.inventoryRefresh = metrics, inventoryCheck, inventoryRefresh
}

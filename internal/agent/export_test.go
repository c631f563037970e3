package agent

import "time"

// SetReportIntervals sets, for tests, the time between metric samples
// (instead of metrics_seconds) and the inventory's check and refresh
// intervals; zero keeps the default.
func SetReportIntervals(o *Options, metrics, inventoryCheck, inventoryRefresh time.Duration) {
	o.metricsInterval, o.inventoryCheck, o.inventoryRefresh = metrics, inventoryCheck, inventoryRefresh
}

// SetInventoryDebounce sets, for tests, how long the inventory loop waits
// for more changes after a watcher told of one.
func SetInventoryDebounce(o *Options, d time.Duration) { o.inventoryDebounce = d }

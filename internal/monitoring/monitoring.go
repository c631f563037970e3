// Package monitoring owns alert rules and alerts: the rule kinds with their
// units, bounds and defaults, the evaluation that opens and resolves
// alerts, and the presence watcher that publishes servers going offline
// and coming back. It reads servers through the servers service (whose
// status counts heartbeats not yet written) and everything else through
// the small Store interface it declares.
package monitoring

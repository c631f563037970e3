// Package monitoring watches the fleet: it publishes servers going offline
// and coming back. It reads servers through the servers service (whose
// status counts heartbeats not yet written) and stores through the small
// interfaces it declares.
package monitoring

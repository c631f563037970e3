// Package notify tells people what happened: each user's inbox, and (as
// further destinations of the event bus) e-mail and notification channels.
// It consumes events from the events package's dispatcher through
// Destinations and stores through the small interfaces it declares.
package notify

package auth

import (
	"context"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
)

// knownDevice is what a sign-in attempt's device cookie turned out to be.
type knownDevice struct {
	token, hash string // the cookie sent and its hash, "" for none
	known       bool   // the cookie is a live device of the account signing in
}

// device looks up the device cookie token for the account userID ("" for
// an unknown account). It is looked up whenever one is sent, for known
// and unknown accounts alike; only a live device of this very account
// counts as known.
func (s *Service) device(ctx context.Context, token, userID string, now time.Time) (knownDevice, error) {
	if !strings.HasPrefix(token, devicePrefix+"_") || len(token) > 100 {
		return knownDevice{}, nil
	}
	hash := ids.Hash(token)
	d, err := s.store.DeviceByHash(ctx, hash)
	if fault.Is(err, fault.NotFound) {
		return knownDevice{}, nil
	}
	if err != nil {
		return knownDevice{}, err
	}
	live := d.RevokedAt == nil && now.Before(d.ExpiresAt)
	if !live || userID == "" || d.UserID != userID {
		return knownDevice{}, nil
	}
	return knownDevice{token: token, hash: hash, known: true}, nil
}

// rememberDevice records a completed sign-in: a known device's cookie is
// kept and lives DeviceTTL from now; any other client gets a new device
// cookie bound to the account. It returns the cookie and its end.
func (s *Service) rememberDevice(ctx context.Context, userID string, d knownDevice, now time.Time) (string, time.Time, error) {
	expires := now.Add(DeviceTTL)
	if d.known {
		return d.token, expires, s.store.TouchDevice(ctx, d.hash, now, expires)
	}
	token := ids.Token(devicePrefix)
	err := s.store.CreateDevice(ctx, Device{Hash: ids.Hash(token), UserID: userID, CreatedAt: now, LastUsedAt: now, ExpiresAt: expires})
	return token, expires, err
}

package store

import (
	"context"
	"encoding/json"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/apps"
)

// PrunableImageIDs returns the image ids of an application's succeeded
// deployments older than its newest keep ones, newest first, distinct,
// from at most limit deployments past those: the images that fell out of
// the ones kept for rollbacks. An image among the newest keep deployments,
// or that another application on the same server ever ran, is left out.
func (s *Store) PrunableImageIDs(ctx context.Context, appID string, keep, limit int) ([]string, error) {
	var rows []string
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT image_id FROM deployments WHERE app_id = ? AND status = 'succeeded' AND image_id != ''
		ORDER BY id DESC LIMIT ?`), appID, keep+limit); err != nil {
		return nil, err
	}
	if len(rows) <= keep {
		return []string{}, nil
	}
	kept := map[string]bool{}
	for _, id := range rows[:keep] {
		kept[id] = true
	}
	var cands []string
	for _, id := range rows[keep:] {
		if !kept[id] {
			kept[id] = true // once
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return []string{}, nil
	}
	q, args, err := sqlx.In(`SELECT DISTINCT d.image_id FROM deployments d WHERE d.status = 'succeeded' AND d.image_id IN (?)
		AND d.app_id != ? AND d.app_id IN (SELECT o.id FROM applications o WHERE o.server_id = (SELECT a.server_id FROM applications a WHERE a.id = ?))`,
		cands, appID, appID)
	if err != nil {
		return nil, err
	}
	var shared []string
	if err := s.r.SelectContext(ctx, &shared, s.rebind(q), args...); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(cands))
	for _, id := range cands {
		if !contains(shared, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// OtherAppsImageIDs returns the images that the succeeded deployments of
// the other applications on appID's server ran: their image ids and
// every service's image of their kept compose releases; distinct.
func (s *Store) OtherAppsImageIDs(ctx context.Context, appID string) ([]string, error) {
	var rows []struct {
		ImageID     string `db:"image_id"`
		KeptRelease string `db:"kept_release"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT d.image_id, d.kept_release FROM deployments d
		WHERE d.status = 'succeeded' AND d.app_id != ?
		AND d.app_id IN (SELECT o.id FROM applications o WHERE o.server_id = (SELECT a.server_id FROM applications a WHERE a.id = ?))`),
		appID, appID); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := []string{}
	add := func(id string) {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, r := range rows {
		add(r.ImageID)
		if r.KeptRelease == "" {
			continue
		}
		var rel apps.Release
		if err := json.Unmarshal([]byte(r.KeptRelease), &rel); err != nil {
			return nil, err
		}
		for _, id := range rel.Services {
			add(id)
		}
	}
	return out, nil
}

package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/metrics"
)

// inventoryData is the stored JSON of an inventory. Nil lists stay null:
// they mean the agent could not read that part.
type inventoryData struct {
	Services   []agentproto.ServiceInfo   `json:"services"`
	Containers []agentproto.ContainerInfo `json:"containers"`
	Ports      []agentproto.ListeningPort `json:"ports"`
	Images     []agentproto.ImageInfo     `json:"images"`
	Volumes    []agentproto.VolumeInfo    `json:"volumes"`
	Networks   []agentproto.NetworkInfo   `json:"networks"`
}

// PutInventory replaces a server's inventory.
func (s *Store) PutInventory(ctx context.Context, serverID string, inv metrics.Inventory) error {
	data, err := json.Marshal(inventoryData{Services: inv.Services, Containers: inv.Containers, Ports: inv.Ports, Images: inv.Images,
		Volumes: inv.Volumes, Networks: inv.Networks})
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, s.rebind(`INSERT INTO server_inventory (server_id, collected_at, received_at, data) VALUES (?, ?, ?, ?)
		ON CONFLICT (server_id) DO UPDATE SET collected_at = excluded.collected_at, received_at = excluded.received_at, data = excluded.data`),
		serverID, ms(inv.CollectedAt), ms(inv.ReceivedAt), string(data))
	return err
}

// ServerInventory returns a server's inventory; nil if none.
func (s *Store) ServerInventory(ctx context.Context, serverID string) (*metrics.Inventory, error) {
	var r struct {
		CollectedAt int64  `db:"collected_at"`
		ReceivedAt  int64  `db:"received_at"`
		Data        string `db:"data"`
	}
	err := s.r.GetContext(ctx, &r, s.rebind(`SELECT collected_at, received_at, data FROM server_inventory WHERE server_id = ?`), serverID)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d inventoryData
	if err := json.Unmarshal([]byte(r.Data), &d); err != nil {
		return nil, err
	}
	return &metrics.Inventory{CollectedAt: fromMS(r.CollectedAt), ReceivedAt: fromMS(r.ReceivedAt),
		Services: d.Services, Containers: d.Containers, Ports: d.Ports, Images: d.Images,
		Volumes: d.Volumes, Networks: d.Networks}, nil
}

// ServerImageIDs returns the image ids of a server's latest inventory and
// when it was collected; known is false when there is no inventory or it
// does not list images (the agent could not read them, or is older).
func (s *Store) ServerImageIDs(ctx context.Context, serverID string) (ids []string, collectedAt time.Time, known bool, err error) {
	inv, err := s.ServerInventory(ctx, serverID)
	if err != nil || inv == nil || inv.Images == nil {
		return nil, time.Time{}, false, err
	}
	ids = make([]string, len(inv.Images))
	for i, im := range inv.Images {
		ids[i] = im.ID
	}
	return ids, inv.CollectedAt, true, nil
}

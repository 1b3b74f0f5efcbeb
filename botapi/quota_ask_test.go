package botapi

import (
	"context"
	"testing"

	"botpool.dev/botpool/store"
)

// askRecorder is a Liveness that takes asks, as the Postgres store does.
type askRecorder struct {
	fakeLiveness
	asks []store.SlotAsk
}

func (a *askRecorder) RecordSlotAsk(_ context.Context, ask store.SlotAsk) error {
	a.asks = append(a.asks, ask)
	return nil
}

// TestEventQuotaPassesAsksOn: the quota wrapper the binary puts around the store keeps the
// store's RecordSlotAsk reachable, so a standby slot's container can make it Ready.
func TestEventQuotaPassesAsksOn(t *testing.T) {
	live := &askRecorder{}
	q := WithEventQuota(live, EventQuota{}, nil, nil)
	rec, ok := q.(interface {
		RecordSlotAsk(context.Context, store.SlotAsk) error
	})
	if !ok {
		t.Fatal("the event quota's Liveness hides RecordSlotAsk: the bot API would record no ask")
	}
	if err := rec.RecordSlotAsk(context.Background(), store.SlotAsk{Name: "pool-zoom-001"}); err != nil {
		t.Fatal(err)
	}
	if len(live.asks) != 1 || live.asks[0].Name != "pool-zoom-001" {
		t.Errorf("the store got asks %+v, want the one sent", live.asks)
	}
}

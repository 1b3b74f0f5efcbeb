package controllers

import (
	"testing"
	"time"
)

// TestRoomFor: a reservation or an ad-hoc bot fits when, at every instant of its hold, the
// holds already there leave a slot of maxSlots.
func TestRoomFor(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	h := func(from, until int) hold { return hold{from: at(from), until: at(until)} }
	tests := []struct {
		name        string
		holds       []hold
		from, until int
		maxSlots    int
		want        bool
		peak        int
	}{
		{"an empty pool", nil, 0, 60, 1, true, 0},
		{"full at the start", []hold{h(0, 60), h(-30, 30)}, 0, 60, 2, false, 2},
		{"full only later in the hold: a reservation at 14:30", []hold{h(30, 90), h(30, 90)}, 0, 60, 2, false, 2},
		{"a hold that ends as this one starts does not count", []hold{h(-60, 0), h(-60, 0)}, 0, 60, 1, true, 0},
		{"one that starts as this one ends does not count", []hold{h(60, 120)}, 0, 60, 1, true, 0},
		{"holds that never overlap each other count one at a time", []hold{h(0, 20), h(20, 40), h(40, 60)}, 0, 60, 2, true, 1},
		{"the peak, not the sum", []hold{h(0, 30), h(10, 40), h(20, 50), h(45, 60)}, 0, 60, 3, false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := peakHolds(tt.holds, at(tt.from), at(tt.until)); got != tt.peak {
				t.Errorf("peak %d, want %d", got, tt.peak)
			}
			if got := roomFor(tt.holds, at(tt.from), at(tt.until), tt.maxSlots); got != tt.want {
				t.Errorf("roomFor %v, want %v", got, tt.want)
			}
		})
	}
}

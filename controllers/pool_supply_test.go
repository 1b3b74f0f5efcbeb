package controllers

import (
	"testing"
)

func TestSlotsToCreate(t *testing.T) {
	tests := []struct {
		name                                      string
		maxSlots, minIdle, total, available, wait int
		want                                      int
	}{
		{"lazy pool, nobody waits", 100, 0, 0, 0, 0, 0},
		{"lazy pool, a burst arrives", 100, 0, 0, 0, 1000, 100},
		{"waiting bots use free slots first", 100, 0, 10, 4, 6, 2},
		{"free slots cover the queue", 100, 0, 10, 8, 6, 0},
		{"pre-warm minIdle", 10, 3, 0, 0, 0, 3},
		{"minIdle already free", 10, 3, 5, 3, 0, 0},
		{"queue and minIdle: the larger need wins", 10, 3, 2, 1, 2, 2},
		{"at maxSlots", 10, 3, 10, 0, 50, 0},
		{"over maxSlots after maxSlots was lowered", 5, 0, 8, 0, 3, 0},
	}
	for _, tt := range tests {
		if got := slotsToCreate(tt.maxSlots, tt.minIdle, tt.total, tt.available, tt.wait); got != tt.want {
			t.Errorf("%s: slotsToCreate = %d, want %d", tt.name, got, tt.want)
		}
	}
}

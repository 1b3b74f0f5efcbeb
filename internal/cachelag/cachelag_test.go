package cachelag

import (
	"fmt"
	"sync"
	"testing"
)

func TestTracker(t *testing.T) {
	var tr Tracker
	if tr.Stale("a", "1") {
		t.Fatal("an object never written is stale")
	}
	tr.Wrote("a", "1") // status patch: 1 → 2
	tr.Wrote("a", "2") // update: 2 → 3
	for _, v := range []string{"1", "2"} {
		if !tr.Stale("a", v) {
			t.Errorf("version %s, replaced by our write, is not stale", v)
		}
	}
	if tr.Stale("b", "1") {
		t.Error("another object's versions count")
	}
	if tr.Stale("a", "3") {
		t.Error("the version our write made is stale")
	}
	if tr.Stale("a", "1") {
		t.Error("once the cache caught up, the object is still tracked")
	}

	for i := range keep + 2 {
		tr.Wrote("c", fmt.Sprint(i))
	}
	if !tr.Stale("c", fmt.Sprint(keep+1)) {
		t.Error("the newest replaced version is forgotten")
	}
	if tr.Stale("c", "0") {
		t.Errorf("more than %d versions are kept", keep)
	}

	var none *Tracker
	none.Wrote("a", "1")
	if none.Stale("a", "1") {
		t.Error("a nil Tracker remembers")
	}
}

func TestTrackerConcurrentWriters(t *testing.T) {
	var tr Tracker
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				tr.Wrote("a", fmt.Sprint(w, "-", i%3))
				tr.Stale("a", "x")
			}
		})
	}
	wg.Wait()
}

// TestReplacedForgetsNothing: another reader's question about a version leaves the record for
// the object's controller, which Stale would have ended on a newer version.
func TestReplacedForgetsNothing(t *testing.T) {
	var tr Tracker
	tr.Wrote("a", "1")
	if !tr.Replaced("a", "1") || tr.Replaced("a", "2") {
		t.Fatal("Replaced answers wrong")
	}
	if !tr.Stale("a", "1") {
		t.Fatal("Replaced(a, 2) ended the record Stale relies on")
	}
	var none *Tracker
	if none.Replaced("a", "1") {
		t.Fatal("a nil Tracker remembers something")
	}
}

// Package cachelag tells a reader of the informer cache that it still holds a version of an
// object that one of this process's own writes replaced. Acting on that version would judge a
// past state, and a write built on it would only be refused with a 409 conflict; the reader
// waits for the cache instead, which shows the write within milliseconds.
//
// Writers go through NewClient, which records every write in a Tracker; readers ask the
// Tracker whether the version they read is Stale.
package cachelag

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// keep bounds the replaced versions remembered per object: a pass writes at most a few.
const keep = 8

// Tracker remembers, per object uid, the resourceVersions this process's writes replaced.
// Its zero value is ready to use, a nil *Tracker remembers nothing, and it is safe for
// concurrent use: one Tracker may serve several writers of the same objects.
type Tracker struct {
	mu       sync.Mutex
	replaced map[types.UID][]string
}

// Wrote records that a write replaced version old of the object uid.
func (t *Tracker) Wrote(uid types.UID, old string) {
	if t == nil || old == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.replaced == nil {
		t.replaced = map[types.UID][]string{}
	}
	versions := t.replaced[uid]
	if len(versions) >= keep {
		versions = slices.Delete(versions, 0, 1)
	}
	t.replaced[uid] = append(versions, old)
}

// Stale reports whether version of the object uid is one a write of ours replaced. Every
// replaced version is remembered (a status patch and an update in one pass replace two) until
// a read returns a version that is none of them: then the cache has caught up, and the
// object is forgotten.
func (t *Tracker) Stale(uid types.UID, version string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	versions, ok := t.replaced[uid]
	if !ok {
		return false
	}
	if slices.Contains(versions, version) {
		return true
	}
	delete(t.replaced, uid)
	return false
}

// Replaced reports whether version of the object uid is one a write of ours replaced, like
// Stale, but forgets nothing: for a reader that is not the object's controller (the
// dispatcher, reading slots), whose read must not end the record the controller's next pass
// relies on.
func (t *Tracker) Replaced(uid types.UID, version string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Contains(t.replaced[uid], version)
}

// Forget drops what is remembered of the object uid: it is gone (its last finalizer removed),
// so no read will ever show a newer version and clear it.
func (t *Tracker) Forget(uid types.UID) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.replaced, uid)
}

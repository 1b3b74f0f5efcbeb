package callback

import (
	"container/list"
	"time"
)

// recentSet remembers keys that finished, for ttl and at most max of them, so a reconciler
// calling Enqueue on every pass of a finished bot does not resend. Memory stays bounded however
// many bots finish: entries are kept in finishing order and trimmed from the oldest end.
type recentSet struct {
	ttl     time.Duration
	max     int
	order   *list.List // of *recentEntry, oldest first
	entries map[string]*list.Element
}

type recentEntry struct {
	key string
	at  time.Time
}

func newRecentSet(ttl time.Duration, maxEntries int) *recentSet {
	return &recentSet{ttl: ttl, max: maxEntries, order: list.New(), entries: map[string]*list.Element{}}
}

func (s *recentSet) add(key string, now time.Time) {
	if e, ok := s.entries[key]; ok {
		e.Value.(*recentEntry).at = now
		s.order.MoveToBack(e)
	} else {
		s.entries[key] = s.order.PushBack(&recentEntry{key: key, at: now})
	}
	s.trim(now)
}

func (s *recentSet) contains(key string, now time.Time) bool {
	s.trim(now)
	_, ok := s.entries[key]
	return ok
}

// trim drops entries past the size bound or older than ttl; the list is in time order, so it
// stops at the first entry that is young enough.
func (s *recentSet) trim(now time.Time) {
	for e := s.order.Front(); e != nil; e = s.order.Front() {
		re := e.Value.(*recentEntry)
		if len(s.entries) <= s.max && now.Sub(re.at) < s.ttl {
			return
		}
		s.order.Remove(e)
		delete(s.entries, re.key)
	}
}

package callback

import (
	"container/list"
	"time"
)

// recentSet remembers keys that finished, with their Result, for ttl and at most max of them,
// so a reconciler calling Enqueue on every pass of a finished bot does not resend and can read
// the outcome (Notifier.Result) to record it on the bot. Memory stays bounded however many bots
// finish: entries are kept in finishing order and trimmed from the oldest end.
type recentSet struct {
	ttl     time.Duration
	max     int
	order   *list.List // of *recentEntry, oldest first
	entries map[string]*list.Element
}

type recentEntry struct {
	key string
	at  time.Time
	res Result
}

func newRecentSet(ttl time.Duration, maxEntries int) *recentSet {
	return &recentSet{ttl: ttl, max: maxEntries, order: list.New(), entries: map[string]*list.Element{}}
}

func (s *recentSet) add(key string, res Result, now time.Time) {
	if e, ok := s.entries[key]; ok {
		re := e.Value.(*recentEntry)
		re.at, re.res = now, res
		s.order.MoveToBack(e)
	} else {
		s.entries[key] = s.order.PushBack(&recentEntry{key: key, at: now, res: res})
	}
	s.trim(now)
}

func (s *recentSet) contains(key string, now time.Time) bool {
	_, ok := s.get(key, now)
	return ok
}

func (s *recentSet) get(key string, now time.Time) (Result, bool) {
	s.trim(now)
	e, ok := s.entries[key]
	if !ok {
		return Result{}, false
	}
	return e.Value.(*recentEntry).res, true
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

package sim

import (
	"container/heap"
	"time"
)

// event is something due at a time; seq keeps equal times in scheduling order.
type event struct {
	at  time.Time
	seq int
	fn  func(at time.Time)
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// after schedules fn at a simulated delay from at. Callers hold s.mu.
func (s *Sim) after(at time.Time, d time.Duration, fn func(time.Time)) {
	s.seq++
	heap.Push(&s.events, &event{at: at.Add(s.scaled(d)), seq: s.seq, fn: fn})
}

// at schedules fn at the clock time t, not scaled by Speed: a time of day, such as a cron
// schedule's. Callers hold s.mu.
func (s *Sim) at(t time.Time, fn func(time.Time)) {
	s.seq++
	heap.Push(&s.events, &event{at: t, seq: s.seq, fn: fn})
}

// advance runs every due event in time order, starting deployments as capacity frees up at
// the moment it frees up, so one big clock step gives the same result as many small ones.
// Callers hold s.mu.
func (s *Sim) advance() {
	now := s.clk.Now()
	cursor := s.lastTick
	for {
		s.schedule(cursor)
		if s.events.Len() == 0 || s.events[0].at.After(now) {
			break
		}
		e := heap.Pop(&s.events).(*event)
		if e.at.After(cursor) {
			cursor = e.at
		}
		e.fn(cursor)
	}
	if now.After(s.lastTick) {
		s.lastTick = now
	}
}

package callback

import (
	"container/heap"
	"context"
	"time"

	"k8s.io/utils/clock"
)

// delayHeap orders callbacks waiting for a retry by due time.
type delayHeap []*item

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *delayHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// retryAfter parks it in the delay heap; the scheduler hands it back to the workers when due.
func (n *Notifier) retryAfter(it *item, delay time.Duration) {
	n.mu.Lock()
	n.release(it, false)
	it.due = n.clock.Now().Add(delay)
	heap.Push(&n.delayed, it)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// schedule moves due callbacks from the delay heap to the ready queue. It keeps one timer, on
// the injected clock, for the earliest due callback, and re-arms it whenever the heap changes.
func (n *Notifier) schedule(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		var fired <-chan time.Time
		if wait, ok := n.releaseDue(); ok {
			timer = n.clock.NewTimer(wait)
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-fired:
		}
	}
}

// releaseDue sends every due callback to the ready queue and returns how long until the next
// one is due, if any is waiting.
func (n *Notifier) releaseDue() (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	for n.delayed.Len() > 0 {
		next := n.delayed[0]
		if wait := next.due.Sub(now); wait > 0 {
			return wait, true
		}
		heap.Pop(&n.delayed)
		n.makeReady(next)
	}
	return 0, false
}

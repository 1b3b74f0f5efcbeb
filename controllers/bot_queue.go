package controllers

import (
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// queueTimeout is how long a bot may wait: its own queueTimeout, else the pool's default,
// capped by the pool's maximum.
func queueTimeout(bot *v1.Bot, pool *v1.BotPool) time.Duration {
	q := pool.Spec.Queue
	limit := q.MaxTimeout.OrDefault(v1.DefaultMaxQueueTimeout)
	d := bot.Spec.QueueTimeout.OrDefault(q.DefaultTimeout.OrDefault(v1.DefaultQueueTimeout))
	return min(d, limit)
}

// queueDeadline is when a queued bot's wait ends: queueTimeout after it entered the queue, or
// after its last failed start when it went back (its queuedAt, kept for its place in the
// queue, would end a retried bot's wait at once).
func queueDeadline(bot *v1.Bot, pool *v1.BotPool) time.Time {
	from := policy.QueuedAt(bot)
	if n := len(bot.Status.StartAttempts); n > 0 && bot.Status.StartAttempts[n-1].At.After(from) {
		from = bot.Status.StartAttempts[n-1].At.Time
	}
	return from.Add(queueTimeout(bot, pool))
}

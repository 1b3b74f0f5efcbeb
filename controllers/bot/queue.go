package bot

import (
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// QueueTimeout is how long a bot may wait: its own spec.queueTimeout, else the pool's default,
// capped by the pool's maximum.
func QueueTimeout(bot *v1.Bot, pool *v1.BotPool) time.Duration {
	q := pool.Spec.Queue
	limit := q.MaxTimeout.OrDefault(v1.DefaultMaxQueueTimeout)
	d := bot.Spec.QueueTimeout.OrDefault(q.DefaultTimeout.OrDefault(v1.DefaultQueueTimeout))
	return min(d, limit)
}

// QueueDeadline is when a queued bot's wait ends: QueueTimeout after it entered the queue, or
// after its last failed start when it went back (its queuedAt, kept for its place in the
// queue, would end a retried bot's wait at once).
func QueueDeadline(bot *v1.Bot, pool *v1.BotPool) time.Time {
	from := policy.QueuedAt(bot)
	if n := len(bot.Status.StartAttempts); n > 0 && bot.Status.StartAttempts[n-1].At.After(from) {
		from = bot.Status.StartAttempts[n-1].At.Time
	}
	return from.Add(QueueTimeout(bot, pool))
}

// Package botfailures defines botpool_bots_failed_total, the one metric two components count
// into: the controllers, for the Bots they fail (HeartbeatTimeout, QueueTimeout, SlotLost…),
// and the bot API, for a Fatal a bot reports itself. One definition, so that both register
// the same family (through promreg, which shares it) and never disagree on its help or labels.
package botfailures

import (
	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/internal/promreg"
)

// Reported is the reason label of a Fatal the bot reported itself, whatever reason it gave
// (the bot's own text would make the label unbounded; it is on the Bot's status).
const Reported = "BotReported"

// Register registers botpool_bots_failed_total with reg (nil: none), or returns the family
// already registered there.
func Register(reg prometheus.Registerer) *prometheus.CounterVec {
	return promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "botpool_bots_failed_total",
		Help: "Bots that ended Fatal, by reason (" + Reported + ": the bot reported Fatal itself).",
	}, []string{"reason"}))
}

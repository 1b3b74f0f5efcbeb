// Package metrics holds the controllers' Prometheus series (botpool_*): the pools' slot counts
// and phases, slot transitions and recoveries, the time a bot waits and takes to start,
// reservations served late, failed bots, and the reconciles a tenant's share deferred.
// The README's "Metrics" section lists every series with its labels.
//
// # Where things are
//
//	metrics.go           Metrics: the series, New, and one method per thing the controllers count
package metrics

// Package deploygate holds the deploy gate the pool and slot reconcilers share: it bounds the
// deployments a pool has in flight (maxConcurrentDeployments) and, once a server's settings
// are known, the deployments on the server over every pool of the same Coolify user; it lets
// the first deployment of an image on a server run alone; it pauses a server or a user's
// deployments when Coolify says its queue is full or its rate limit used; starts go before
// recycles; and the pools' image pre-pulls take turns for the builds the starts leave free.
//
// # Where things are
//
//	gate.go              Gate: Admit (a slot's deployment), AdmitPull and Pulling (a pool's pre-pull), Done (which wakes the slots it refused), Pause
package deploygate

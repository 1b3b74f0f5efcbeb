// Package tenantshare divides a controller's reconcile workers between namespaces: each
// namespace may always have its own share of passes in flight, and beyond it takes places of
// a pool all namespaces share; a request past its namespace's places is parked, holding no
// goroutine, until a place frees (issue 30; docs/security.md). Share wraps a reconciler and
// gives the controller its options (New, Options).
//
// # Where things are
//
//	tenant_share.go      Share: the places, parking and hand-on, the rate limiter that keeps a parked request's backoff
package tenantshare

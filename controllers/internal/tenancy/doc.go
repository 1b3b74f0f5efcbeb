// Package tenancy holds what the controllers read to serve Bots of one namespace from a pool
// of another: whether a pool admits a namespace (Admission, reading the namespace's labels
// from the cache only when a pool selects by them).
//
// # Where things are
//
//	admission.go         Admission: does a pool admit a namespace, with the reason a refused bot gives
package tenancy

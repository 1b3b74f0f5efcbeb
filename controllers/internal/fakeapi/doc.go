// Package fakeapi is the API server of the controllers' single-pass tests: controller-runtime's
// fake client with the status subresource of the three kinds and the controllers' own cache
// indexes (index.Setup), so a table runs against the indexes the manager has rather than
// copies. Only tests import it.
//
// # Where things are
//
//	fakeapi.go  New: the fake client, and the indexer that registers index.Setup on its builder
package fakeapi

// Package layout holds no code, only the tests that keep the controllers' layout true: which
// package under controllers/ may import which (layout_test.go's table), that pure policy does
// no I/O, that no package grows past packageLines, that every package's doc.go maps its
// files, and that the controllers never reach the bot API's HTTP server. They read the
// sources, so they run without an API server.
//
// # Where things are
//
//	doc.go  this map; the tests are in layout_test.go
package layout

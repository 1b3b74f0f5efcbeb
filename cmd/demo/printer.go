package main

import (
	"fmt"
	"io"
)

// printer writes the demo's output. A failed write (a closed pipe, a full disk) is no reason to
// stop half-way and leave processes behind, so write errors are dropped here, in one place.
type printer struct{ w io.Writer }

func (p printer) f(format string, args ...any) { _, _ = fmt.Fprintf(p.w, format, args...) }

package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"botpool.dev/botpool/store"
)

// errKind is what the store does with a failed statement.
type errKind int

const (
	// kindOther is a statement the server refused for another reason: returned to the caller.
	kindOther errKind = iota
	// kindConnection means the server could not be reached or went away: buffer and recover.
	kindConnection
	// kindConflict is a uniqueness violation: ErrConflict to the caller, never buffered.
	kindConflict
)

func (k errKind) String() string {
	switch k {
	case kindConnection:
		return "connection"
	case kindConflict:
		return "conflict"
	default:
		return "other"
	}
}

// classify sorts an error from pgx. Only errors that say the server is unreachable or gone
// count as an outage: an unknown client-side error buffered as one would be replayed forever.
func classify(err error) errKind {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "23505" || code == "23P01": // unique_violation, exclusion_violation
			return kindConflict
		case strings.HasPrefix(code, "08"), // connection_exception
			code == "57P01", code == "57P02", code == "57P03", // admin/crash shutdown, cannot connect now
			code == "53300": // too_many_connections
			return kindConnection
		default:
			return kindOther
		}
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, pgconn.ErrConnClosed), pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.Is(err, context.DeadlineExceeded): // our statement timeout: the server hangs
		return kindConnection
	}
	return kindOther
}

// conflictError turns a uniqueness violation into store.ErrConflict, naming the constraint.
func conflictError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("%w: %s: %s", store.ErrConflict, pgErr.ConstraintName, pgErr.Detail)
	}
	return fmt.Errorf("%w: %w", store.ErrConflict, err)
}

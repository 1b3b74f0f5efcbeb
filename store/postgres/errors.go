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
	// kindConnection means the server cannot take the write now: it could not be reached or
	// went away, or it refuses writes for a while (read-only, disk full, out of memory, too
	// many connections, shutting down). Buffer and recover: like an outage, it says nothing
	// about the write, and the write will succeed when the server is well again.
	kindConnection
	// kindConflict is a uniqueness violation: ErrConflict to the caller, never buffered.
	kindConflict
	// kindInvalid is data the server refuses (class 22, e.g. a NUL in jsonb): the record's
	// fault, returned as store.ErrInvalid and never retried.
	kindInvalid
)

func (k errKind) String() string {
	switch k {
	case kindConnection:
		return "connection"
	case kindConflict:
		return "conflict"
	case kindInvalid:
		return "invalid"
	default:
		return "other"
	}
}

// unavailableCode reports whether a SQLSTATE says the server cannot take writes now, whatever
// the write: an outage as far as the store is concerned. A read-only or full server used to
// count as an ordinary error, so heartbeats were refused while the store stayed "available"
// and its reads returned ever older beats: every running bot then failed HeartbeatTimeout.
func unavailableCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection_exception
		strings.HasPrefix(code, "53"),                     // insufficient_resources: disk full, out of memory, too many connections
		strings.HasPrefix(code, "57"),                     // operator_intervention: admin/crash shutdown, cannot connect now, query canceled
		strings.HasPrefix(code, "58"),                     // system_error: I/O error
		code == "25006",                                   // read_only_sql_transaction: a read-only database or a demoted primary
		code == "40001", code == "40P01", code == "40003", // serialization failure, deadlock, completion unknown
		code == "55P03", // lock_not_available
		code == "55006": // object_in_use
		return true
	}
	return false
}

// classify sorts an error from pgx. Only errors that say the server is unreachable, gone or
// unable to write now count as an outage: an unknown client-side error buffered as one would
// be replayed forever.
func classify(err error) errKind {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "23505" || code == "23P01": // unique_violation, exclusion_violation
			return kindConflict
		case unavailableCode(code):
			return kindConnection
		case strings.HasPrefix(code, "22"): // data_exception
			return kindInvalid
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

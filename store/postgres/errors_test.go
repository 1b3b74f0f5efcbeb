package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want errKind
	}{
		{"unique violation", &pgconn.PgError{Code: "23505"}, kindConflict},
		{"wrapped unique violation", fmt.Errorf("upsert: %w", &pgconn.PgError{Code: "23505"}), kindConflict},
		{"check violation", &pgconn.PgError{Code: "23514"}, kindOther},
		{"syntax error", &pgconn.PgError{Code: "42601"}, kindOther},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, kindConnection},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, kindConnection},
		{"connection failure", &pgconn.PgError{Code: "08006"}, kindConnection},
		{"too many connections", &pgconn.PgError{Code: "53300"}, kindConnection},
		// A server that cannot write now is an outage, not an ordinary error (issue 13, item 2).
		{"read-only transaction", &pgconn.PgError{Code: "25006"}, kindConnection},
		{"wrapped read-only transaction", fmt.Errorf("heartbeat_batch: %w", &pgconn.PgError{Code: "25006"}), kindConnection},
		{"insufficient resources", &pgconn.PgError{Code: "53000"}, kindConnection},
		{"disk full", &pgconn.PgError{Code: "53100"}, kindConnection},
		{"out of memory", &pgconn.PgError{Code: "53200"}, kindConnection},
		{"configuration limit exceeded", &pgconn.PgError{Code: "53400"}, kindConnection},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, kindConnection},
		{"database dropped", &pgconn.PgError{Code: "57P04"}, kindConnection},
		{"query canceled", &pgconn.PgError{Code: "57014"}, kindConnection},
		{"io error", &pgconn.PgError{Code: "58030"}, kindConnection},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, kindConnection},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, kindConnection},
		{"lock not available", &pgconn.PgError{Code: "55P03"}, kindConnection},
		// Data the server refuses is the record's fault (issue 13, item 9).
		{"untranslatable character", &pgconn.PgError{Code: "22P05"}, kindInvalid},
		{"invalid json text", &pgconn.PgError{Code: "22P02"}, kindInvalid},
		{"numeric out of range", &pgconn.PgError{Code: "22003"}, kindInvalid},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, kindOther},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, kindConnection},
		{"eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), kindConnection},
		{"closed conn", pgconn.ErrConnClosed, kindConnection},
		{"statement timeout", context.DeadlineExceeded, kindConnection},
		{"unknown client error", errors.New("cannot encode"), kindOther},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := classify(c.err); got != c.want {
				t.Fatalf("classify(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

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

package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockID is the advisory lock that serialises migrations of one database: "botpool"
// in ASCII, distinct from goose's default so another goose user of the database is not blocked.
const migrationLockID int64 = 0x626f74706f6f6c

// versionTable is goose's bookkeeping table.
const versionTable = "botpool_schema_version"

// migrate applies the pending migrations under a session advisory lock: managers starting
// together (a rollout) take turns, and the ones after the first find nothing to do.
func migrate(ctx context.Context, pool *pgxpool.Pool) (err error) {
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	// Poll the lock every second for up to five minutes (goose's granularity is the second).
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer func() { err = errors.Join(err, db.Close()) }()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithTableName(versionTable),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	return nil
}

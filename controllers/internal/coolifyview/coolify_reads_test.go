package coolifyview

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestAppsByNamePrefersTheTagsOwnMark: a Coolify server that ignores the tag filter lists every
// pool's applications, whose names repeat (every pool's puller on a server is
// botpool-pull-<server>; slot names repeat across namespaces). The pool's list by name gives
// the application with its own tag's owner mark, whichever comes first; a lone application
// without any mark (made before owner marks) is kept.
func TestAppsByNamePrefersTheTagsOwnMark(t *testing.T) {
	const tag = "botpool-aaaa"
	mine := coolify.Application{UUID: "mine", Name: "botpool-pull-srv", Description: "puller {" + tag + "@x}"}
	theirs := coolify.Application{UUID: "theirs", Name: "botpool-pull-srv", Description: "puller {botpool-bbbb@y}"}
	legacy := coolify.Application{UUID: "legacy", Name: "pool-zoom-001", Description: "[IDLE] Available - never used"}
	for _, order := range [][]coolify.Application{{mine, theirs, legacy}, {theirs, mine, legacy}} {
		clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
		api := &bt.Coolify{ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) { return order, nil }}
		apps, err := (&BulkReader{Clock: clk}).Apps(context.Background(), api, tag, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got := apps["botpool-pull-srv"].UUID; got != "mine" {
			t.Errorf("listed %s first: the puller by name is %s, want mine", order[0].UUID, got)
		}
		if got := apps["pool-zoom-001"].UUID; got != "legacy" {
			t.Errorf("the unmarked application alone under its name is %q, want legacy", got)
		}
	}
}

package slot

import (
	"strings"
	"testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestServerKeyIsPerInstanceAndUser: the deploy gate's server key of a slot's pool differs
// for another Coolify instance or another user's token, and is one for the pools of one user.
func TestServerKeyIsPerInstanceAndUser(t *testing.T) {
	client := func(url, token string) coolifyview.CoolifyAPI {
		c, err := coolify.New(url, token)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r := &Reconciler{Coolify: &coolifyview.BulkReader{}}
	key := func(api coolifyview.CoolifyAPI, pool string) string {
		return r.serverOf(&slotScope{api: api, pool: bt.MakePool("ns", pool).Placement("", "srv-0", "").Obj(), slot: &v1.BotPoolSlot{}}).Key
	}
	mine := key(client("https://coolify-a.example", "1|mine"), "meet")
	if key(client("https://coolify-a.example/api/v1", "1|mine"), "zoom") != mine {
		t.Error("two pools of one user on one server do not share its key")
	}
	if key(client("https://coolify-b.example", "1|mine"), "meet") == mine {
		t.Error("another instance's server of the same uuid shares the key")
	}
	if key(client("https://coolify-a.example", "2|theirs"), "meet") == mine {
		t.Error("another user's pool naming the server shares the key")
	}
	if strings.Contains(mine, "mine") {
		t.Errorf("the key %q shows the token", mine)
	}
}

package bot

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/tenancy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestResolvePoolAcrossNamespaces: the order a bot finds its pool in (its poolRef; else its
// own namespace's pools; else the pools shared with its namespace, the roomiest first), and
// what it is told when the pool it names, or was routed to, does not admit its namespace.
func TestResolvePoolAcrossNamespaces(t *testing.T) {
	tenantLabels := map[string]string{"tenant": "yes"}
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	free := func(p *v1.BotPool, idle int32) *v1.BotPool {
		p.Status.Slots = &v1.SlotCounts{Total: p.Spec.MaxSlots, Idle: idle}
		return p
	}
	objs := []client.Object{
		ns("team-a", tenantLabels), ns("team-b", nil), ns("team-own", tenantLabels),
		// Two shared zoom pools: the roomier one wins.
		free(bt.MakePool("platform", "zoom").MaxSlots(10).SharedWith(tenantLabels).Obj(), 2),
		free(bt.MakePool("platform-2", "zoom").MaxSlots(10).SharedWith(tenantLabels).Obj(), 5),
		// Not shared: never chosen for another namespace.
		free(bt.MakePool("private", "zoom").MaxSlots(10).Obj(), 9),
		// A namespace with a pool of its own uses it, however roomy the shared ones are.
		free(bt.MakePool("team-own", "zoom").MaxSlots(1).Obj(), 0),
	}
	c := fakeapi.New(t, interceptor.Funcs{}, objs...)
	r := &Reconciler{Client: c, Admission: tenancy.Admission{Reader: c}}

	tests := []struct {
		name      string
		bot       *v1.Bot
		wantPool  string // namespace/name, or "" for none
		wantRefus bool
	}{
		{name: "no poolRef, none of its own: the roomiest shared pool", bot: bt.MakeBot("team-a", "b").Obj(), wantPool: "platform-2/zoom"},
		{name: "no poolRef, one of its own", bot: bt.MakeBot("team-own", "b").Obj(), wantPool: "team-own/zoom"},
		{name: "named with its namespace", bot: bt.MakeBot("team-a", "b").PoolIn("platform", "zoom").Obj(), wantPool: "platform/zoom"},
		{name: "named, its namespace not admitted", bot: bt.MakeBot("team-b", "b").PoolIn("platform", "zoom").Obj(), wantRefus: true},
		{name: "named, not shared", bot: bt.MakeBot("team-a", "b").PoolIn("private", "zoom").Obj(), wantRefus: true},
		{name: "no poolRef, not admitted anywhere", bot: bt.MakeBot("team-b", "b").Obj()},
		{name: "routed before, admitted no longer, another pool admits it", bot: bt.MakeBot("team-a", "b").InPoolOf("private", "zoom").Obj(),
			wantPool: "platform-2/zoom"},
		{name: "routed before, admitted no longer, no other pool", bot: bt.MakeBot("team-b", "b").InPoolOf("platform", "zoom").Obj(), wantRefus: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, refused, err := r.resolvePool(t.Context(), tt.bot)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if pool != nil {
				got = pool.Namespace + "/" + pool.Name
			}
			if got != tt.wantPool || (refused != "") != tt.wantRefus {
				t.Fatalf("pool %q, refused %q; want pool %q, a refusal: %v", got, refused, tt.wantPool, tt.wantRefus)
			}
		})
	}
}

package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// TestPoolStalledGauge: botpool_pool_stalled follows the pool's Stalled condition and goes
// with the pool; botpool_bots_failed_total counts by reason. The chart's alerts read both.
func TestPoolStalledGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	pool := &v1.BotPool{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "meet"}}
	stalled := m.PoolStalled.WithLabelValues("team", "meet")

	m.ObservePool(pool)
	if got := testutil.ToFloat64(stalled); got != 0 {
		t.Errorf("a pool without Stalled: %v, want 0", got)
	}
	v1.SetCondition(&pool.Status.Conditions, metav1.Condition{Type: v1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: v1.ReasonInvalidWarmSchedule, Message: "x"}, metav1.Now().Time)
	m.ObservePool(pool)
	if got := testutil.ToFloat64(stalled); got != 1 {
		t.Errorf("a Stalled pool: %v, want 1", got)
	}
	m.ForgetPool("team", "meet")
	if n := testutil.CollectAndCount(m.PoolStalled); n != 0 {
		t.Errorf("%d series left after the pool went", n)
	}

	m.BotFailed(v1.ReasonQueueTimeout)
	m.BotFailed(v1.ReasonQueueTimeout)
	if got := testutil.ToFloat64(m.BotsFailed.WithLabelValues(string(v1.ReasonQueueTimeout))); got != 2 {
		t.Errorf("botpool_bots_failed_total{reason=QueueTimeout} = %v, want 2", got)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("the registry does not gather: %v", err)
	}
}

// TestTenantGauges: botpool_tenant_bots follows the pool's status.tenants, drops a tenant
// that left it, and goes with the pool.
func TestTenantGauges(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	pool := &v1.BotPool{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "zoom"}}
	three := int32(3)
	pool.Status.Tenants = []v1.TenantStatus{{Name: "team-a", Bound: 3, Waiting: 7, Limit: &three}, {Name: "team-b", Bound: 1}}
	m.ObservePool(pool)
	if got := testutil.ToFloat64(m.poolTenants.WithLabelValues("platform", "zoom", "team-a", "waiting")); got != 7 {
		t.Errorf("team-a waiting = %v, want 7", got)
	}
	if got := testutil.ToFloat64(m.poolTenants.WithLabelValues("platform", "zoom", "team-b", "bound")); got != 1 {
		t.Errorf("team-b bound = %v, want 1", got)
	}
	pool.Status.Tenants = pool.Status.Tenants[:1]
	m.ObservePool(pool)
	if n := testutil.CollectAndCount(m.poolTenants); n != 2 {
		t.Errorf("%d series after team-b left the status; want team-a's 2", n)
	}
	m.ForgetPool("platform", "zoom")
	if n := testutil.CollectAndCount(m.poolTenants); n != 0 {
		t.Errorf("%d series left after the pool went", n)
	}
}

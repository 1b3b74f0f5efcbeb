package fakeapi

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// New is a fake client holding objs, with funcs to inject errors.
func New(t testing.TB, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(bt.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1.BotPoolSlot{}, &v1.Bot{}, &v1.BotPool{}).
		WithInterceptorFuncs(funcs)
	if err := index.Setup(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// builderIndexer registers indexes on a fake client builder.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

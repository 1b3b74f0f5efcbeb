package botparams_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/botparams"
	bt "botpool.dev/botpool/internal/botpooltest"
)

func j(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }

func TestMergeLetsTheBotsTopLevelKeysWin(t *testing.T) {
	cases := []struct {
		name          string
		defaults, own *apiextensionsv1.JSON
		want          string
	}{
		{"neither", nil, nil, ""},
		{"bot only, as written", nil, j(`{"b":{"y":2},"a":1}`), `{"b":{"y":2},"a":1}`},
		{"defaults only", j(`{"lang":"en"}`), nil, `{"lang":"en"}`},
		{"null is none", j(`null`), j(`{"a":1}`), `{"a":1}`},
		{"the bot's key replaces the whole default value", j(`{"lang":"en","stt":{"provider":"a","model":"x"}}`),
			j(`{"stt":{"provider":"b"}}`), `{"lang":"en","stt":{"provider":"b"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := botparams.Merge(c.defaults, c.own)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("Merge = %s, want %s", got, c.want)
			}
		})
	}
}

func TestMergeRefusesParametersPastTheLimit(t *testing.T) {
	fits := `{"a":"` + strings.Repeat("x", botparams.MaxParametersBytes-8) + `"}`
	if _, err := botparams.Merge(nil, j(fits)); err != nil {
		t.Fatalf("%d bytes: %v", len(fits), err)
	}
	_, err := botparams.Merge(j(`{"more":"xx"}`), j(fits))
	if p := botparams.AsProblem(err); p == nil || p.Reason != v1.ReasonParametersTooLarge {
		t.Fatalf("merged past %d bytes: %v, want a ParametersTooLarge problem", botparams.MaxParametersBytes, err)
	}
}

func reader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func TestSecretsReadsLabelledKeys(t *testing.T) {
	bot := bt.MakeBot("team-a", "b").SecretParameter("sttKey", "stt", "key").SecretParameter("region", "stt", "region").Obj()
	r := reader(t, bt.ParameterSecret("team-a", "stt", true, map[string]string{"key": "dg_123", "region": "eu"}))
	got, err := botparams.Secrets(context.Background(), r, bot)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["sttKey"] != "dg_123" || got["region"] != "eu" {
		t.Fatalf("Secrets = %v", got)
	}
	if none, err := botparams.Secrets(context.Background(), r, bt.MakeBot("team-a", "plain").Obj()); none != nil || err != nil {
		t.Fatalf("a bot without secret parameters: %v, %v", none, err)
	}
}

func TestSecretsRefusesWhatItMayNotHandOut(t *testing.T) {
	big := strings.Repeat("k", botparams.MaxSecretValueBytes+1)
	nine := strings.Repeat("k", 7<<10)
	cases := []struct {
		name   string
		secret *corev1.Secret
		bot    *v1.Bot
		reason string
	}{
		{"missing Secret", bt.ParameterSecret("team-a", "other", true, map[string]string{"key": "v4lue-of-the-secret"}),
			bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretNotFound},
		{"another namespace's Secret", bt.ParameterSecret("team-b", "stt", true, map[string]string{"key": "v4lue-of-the-secret"}),
			bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretNotFound},
		{"missing key", bt.ParameterSecret("team-a", "stt", true, map[string]string{"other": "v4lue-of-the-secret"}),
			bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretNotFound},
		{"unlabelled", bt.ParameterSecret("team-a", "stt", false, map[string]string{"key": "v4lue-of-the-secret"}),
			bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretNotAllowed},
		{"labelled for pools only", func() *corev1.Secret {
			s := bt.ParameterSecret("team-a", "stt", false, map[string]string{"key": "v4lue-of-the-secret"})
			s.Labels = map[string]string{v1.LabelAllowPoolUse: "true", v1.LabelAllowWebhookSigning: "true"}
			return s
		}(), bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretNotAllowed},
		{"one value too large", bt.ParameterSecret("team-a", "stt", true, map[string]string{"key": big}),
			bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretTooLarge},
		{"all together too large", bt.ParameterSecret("team-a", "stt", true, map[string]string{"a": nine, "b": nine, "c": nine, "d": nine, "e": nine}),
			bt.MakeBot("team-a", "b").SecretParameter("a", "stt", "a").SecretParameter("b", "stt", "b").SecretParameter("c", "stt", "c").
				SecretParameter("d", "stt", "d").SecretParameter("e", "stt", "e").Obj(), v1.ReasonParameterSecretTooLarge},
		{"not text", bt.ParameterSecret("team-a", "stt", true, map[string]string{"key": "\xff\xfe"}),
			bt.MakeBot("team-a", "b").SecretParameter("k", "stt", "key").Obj(), v1.ReasonParameterSecretInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := botparams.Secrets(context.Background(), reader(t, c.secret), c.bot)
			p := botparams.AsProblem(err)
			if p == nil || p.Reason != c.reason || got != nil {
				t.Fatalf("Secrets = %v, %v; want a %s problem and no values", got, err, c.reason)
			}
			for _, v := range c.secret.Data {
				if len(v) > 0 && strings.Contains(p.Message, string(v)) {
					t.Fatalf("the problem's message holds the secret value: %s", p.Message)
				}
			}
		})
	}
}

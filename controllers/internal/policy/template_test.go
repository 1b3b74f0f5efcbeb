package policy

import (
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// fullTemplate sets every field, so each case below can change one.
func fullTemplate() SlotTemplate {
	return SlotTemplate{
		Image: "ghcr.io/example/bot", Tag: "v1", CPUs: "1", Memory: "2g",
		EnvDigest: SecretDigest(map[string][]byte{"KEY": []byte("value")}), APIURL: "http://botpool-api.botpool-system:8082",
		RestartedAt: "2026-11-25T20:00:00Z",
	}
}

// TestTemplateHashPinned pins the hash of two templates. The hash is stored in every pool's
// and slot's status: a change to how it is computed rolls every slot of every pool after an
// operator upgrade, so it must be deliberate (a new "t2-" prefix). The minimal template also
// guards the rule for future fields: one hashed while empty would change it. The first value
// is sha256("image=19:ghcr.io/example/bot;tag=6:latest;"), the second likewise over every
// field: both were worked out outside Go, so they check the framing as documented.
func TestTemplateHashPinned(t *testing.T) {
	for _, tt := range []struct {
		name string
		tmpl SlotTemplate
		want string
	}{
		{"image only", SlotTemplate{Image: "ghcr.io/example/bot"}, "t1-73d7434857aee7fb"},
		{"every field", fullTemplate(), "t1-0d785b6669dff1e6"},
	} {
		if got := tt.tmpl.Hash(); got != tt.want {
			t.Errorf("%s: Hash() = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestTemplateHash(t *testing.T) {
	format := regexp.MustCompile(`^t1-[0-9a-f]{16}$`)
	base := fullTemplate()
	if h := base.Hash(); !format.MatchString(h) {
		t.Fatalf("Hash() = %q, want t1- and 16 hex digits", h)
	}
	if base.Hash() != fullTemplate().Hash() {
		t.Fatal("the same template hashed twice differs")
	}

	// Every field is part of the template: changing any one changes the hash.
	changes := map[string]func(*SlotTemplate){
		"image":      func(t *SlotTemplate) { t.Image = "ghcr.io/example/other" },
		"tag":        func(t *SlotTemplate) { t.Tag = "v2" },
		"cpus":       func(t *SlotTemplate) { t.CPUs = "2" },
		"cpus unset": func(t *SlotTemplate) { t.CPUs = "" },
		"memory":     func(t *SlotTemplate) { t.Memory = "4g" },
		"env": func(t *SlotTemplate) {
			t.EnvDigest = SecretDigest(map[string][]byte{"KEY": []byte("other")})
		},
		"env removed":        func(t *SlotTemplate) { t.EnvDigest = "" },
		"bot API URL":        func(t *SlotTemplate) { t.APIURL = "https://bots.example.com" },
		"restart annotation": func(t *SlotTemplate) { t.RestartedAt = "2026-11-25T21:00:00Z" },
		"restart removed":    func(t *SlotTemplate) { t.RestartedAt = "" },
	}
	seen := map[string]string{base.Hash(): "base"}
	for name, change := range changes {
		tmpl := fullTemplate()
		change(&tmpl)
		h := tmpl.Hash()
		if other, dup := seen[h]; dup {
			t.Errorf("%s: hash %s is the same as %s's", name, h, other)
		}
		seen[h] = name
	}

	// Values are framed with their field's name and length: nothing runs into its neighbour.
	for _, pair := range [][2]SlotTemplate{
		{{Image: "a", Tag: "bc"}, {Image: "ab", Tag: "c"}},
		{{Image: "x", CPUs: "1"}, {Image: "x", Memory: "1"}},
		{{Image: "x", Memory: "2g;env=x"}, {Image: "x", Memory: "2g", EnvDigest: "x"}},
		{{Image: "x", APIURL: "u"}, {Image: "x", RestartedAt: "u"}},
	} {
		if pair[0].Hash() == pair[1].Hash() {
			t.Errorf("%+v and %+v hash alike", pair[0], pair[1])
		}
	}

	// An empty tag is latest, as Coolify and Docker read it.
	if (SlotTemplate{Image: "x"}).Hash() != (SlotTemplate{Image: "x", Tag: "latest"}).Hash() {
		t.Error(`tag "" and "latest" hash differently`)
	}
}

func TestTemplateRefAndPoolTemplate(t *testing.T) {
	p := &v1.BotPool{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.AnnotationRestartedAt: "2026-11-25T20:00:00Z"}},
		Spec: v1.BotPoolSpec{Image: "ghcr.io/example/bot", ImageTag: "v2",
			Resources: v1.SlotResources{CPUs: "1.5", Memory: "2048m"}},
	}
	got := PoolTemplate(p, "digest", "http://api:8082")
	want := SlotTemplate{Image: "ghcr.io/example/bot", Tag: "v2", CPUs: "1.5", Memory: "2048m",
		EnvDigest: "digest", APIURL: "http://api:8082", RestartedAt: "2026-11-25T20:00:00Z"}
	if got != want {
		t.Errorf("poolTemplate = %+v, want %+v", got, want)
	}
	if ref := got.Ref(); ref != "ghcr.io/example/bot:v2" {
		t.Errorf("Ref() = %q", ref)
	}
	if ref := (SlotTemplate{Image: "registry:5000/bot"}).Ref(); ref != "registry:5000/bot:latest" {
		t.Errorf("Ref() without a tag = %q, want the latest tag", ref)
	}
	// A restartedAt longer than the status records counts by what the pulls record: a value
	// that changed only past it rolls nothing (it would otherwise roll the slots without a
	// pull of their image).
	long := strings.Repeat("x", v1.MaxRestartedAtLength)
	p.Annotations[v1.AnnotationRestartedAt] = long + "-a"
	a := PoolTemplate(p, "", "")
	p.Annotations[v1.AnnotationRestartedAt] = long + "-b"
	if b := PoolTemplate(p, "", ""); a.Hash() != b.Hash() || a.RestartedAt != long || a.RestartedAt != RestartedAt(p) {
		t.Errorf("restartedAt past %d characters: templates %q and %q, hashes %s and %s", v1.MaxRestartedAtLength, a.RestartedAt, b.RestartedAt, a.Hash(), b.Hash())
	}
}

func TestSecretDigest(t *testing.T) {
	d := func(kv ...string) string {
		m := map[string][]byte{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = []byte(kv[i+1])
		}
		return SecretDigest(m)
	}
	if d() != "" || SecretDigest(nil) != "" {
		t.Error("an empty or missing Secret must digest to \"\" (the same environment as no slotEnvFrom)")
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(d("a", "b")) {
		t.Errorf("digest %q is not hex SHA-256", d("a", "b"))
	}
	// Map order is random in Go: the same data digests alike every time.
	many := []string{"A", "1", "B", "2", "C", "3", "D", "4", "E", "5", "F", "6", "G", "7", "H", "8"}
	first := d(many...)
	for range 20 {
		if d(many...) != first {
			t.Fatal("the same data digests differently: keys are not sorted")
		}
	}
	distinct := [][]string{
		{"a", "bc"}, {"ab", "c"}, // framing: the key/value boundary moves
		{"a", "b", "c", "d"}, {"a", "b;c=d"}, {"a", "b;1:c=1:d"}, {"a", "bc", "d", ""},
		{"a", ""},       // a key with an empty value is a variable
		{"a", "b"},      // a value change
		{"A", "b"},      // a key rename
		{"a", "b\x00c"}, // binary data
	}
	seen := map[string]int{}
	for i, kv := range distinct {
		h := d(kv...)
		if j, dup := seen[h]; dup {
			t.Errorf("%q and %q digest alike", distinct[j], kv)
		}
		seen[h] = i
	}
}

func TestFloatingTag(t *testing.T) {
	for tag, want := range map[string]bool{
		"": true, "latest": true, "main": true, "master": true, "stable": true, "edge": true,
		"nightly": true, "dev": true, "develop": true, "Latest": true,
		"v1": false, "1.2.3": false, "sha-3f2a9c1": false, "latest-2026": false, "development": false,
		"stable-1.4": false, "main-abc123": false,
	} {
		if got := FloatingTag(tag); got != want {
			t.Errorf("floatingTag(%q) = %v, want %v", tag, got, want)
		}
	}
}

func TestRolloutIntOrPercent(t *testing.T) {
	for _, tt := range []struct {
		v       intstr.IntOrString
		base    int
		up      bool
		want    int
		wantErr bool
	}{
		{v: intstr.FromInt32(3), base: 10, want: 3},
		{v: intstr.FromInt32(3), base: 0, up: true, want: 3}, // a count ignores the base
		{v: intstr.FromInt32(0), base: 10, want: 0},
		{v: intstr.FromString("25%"), base: 10, up: true, want: 3}, // 2.5
		{v: intstr.FromString("25%"), base: 10, want: 2},
		{v: intstr.FromString("1%"), base: 10, up: true, want: 1}, // 0.1 rounds up to one
		{v: intstr.FromString("1%"), base: 10, want: 0},
		{v: intstr.FromString("33%"), base: 3, want: 0}, // 0.99
		{v: intstr.FromString("100%"), base: 7, want: 7},
		{v: intstr.FromString("0%"), base: 7, up: true, want: 0},
		{v: intstr.FromString("50%"), base: 0, up: true, want: 0}, // minIdle 0
		{v: intstr.FromInt32(-1), base: 10, wantErr: true},
		{v: intstr.FromString("-5%"), base: 10, wantErr: true},
		{v: intstr.FromString("2"), base: 10, wantErr: true},
		{v: intstr.FromString("a quarter"), base: 10, wantErr: true},
		{v: intstr.FromString("%"), base: 10, wantErr: true},
	} {
		got, err := ResolveIntOrPercent(tt.v, tt.base, tt.up)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("resolveIntOrPercent(%s, %d, up=%v) = %d, %v; want %d, error %v", tt.v.String(), tt.base, tt.up, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestRolloutBudget(t *testing.T) {
	strategy := func(unavailable, surge any) v1.UpdateStrategy {
		val := func(x any) *intstr.IntOrString {
			switch x := x.(type) {
			case int:
				return ptr.To(intstr.FromInt(x))
			case string:
				return ptr.To(intstr.FromString(x))
			}
			return nil
		}
		return v1.UpdateStrategy{MaxUnavailable: val(unavailable), MaxSurge: val(surge)}
	}
	tests := []struct {
		name string
		in   RolloutInput
		want RolloutStep
	}{
		{name: "defaults: minIdle stays ready, so surge a quarter of minIdle first",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 3}},
		{name: "surge slots warming: wait for them",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 13, BaseSlots: 10, ReadyFree: 10, Outdated: 10, Warming: 3},
			want: RolloutStep{Floor: 10, MaxSurge: 3}},
		{name: "surge slots ready: admit as many outdated ones",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 13, BaseSlots: 10, ReadyFree: 13, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Admit: 3}},
		{name: "admitted slots in flight are out of readyFree: nothing more until they are back",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 13, BaseSlots: 10, ReadyFree: 10, Outdated: 7, InFlight: 3},
			want: RolloutStep{Floor: 10, MaxSurge: 3}},
		{name: "maxUnavailable as a count lowers the floor",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Strategy: strategy(2, nil), Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 8, MaxSurge: 3, Admit: 2}},
		{name: "maxUnavailable percent rounds down (25% of 10 is 2)",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Strategy: strategy("25%", nil), Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 8, MaxSurge: 3, Admit: 2}},
		{name: "maxUnavailable percent below one slot is none (9% of 10)",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Strategy: strategy("9%", nil), Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 3}},
		{name: "maxSurge percent rounds up (1% of 10 is one slot)",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Strategy: strategy(nil, "1%"), Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 1, Surge: 1}},
		{name: "maxUnavailable above minIdle: the floor stops at 0",
			in:   RolloutInput{MinIdle: 2, MaxSlots: 100, Strategy: strategy(5, nil), Total: 4, BaseSlots: 4, ReadyFree: 4, Outdated: 4},
			want: RolloutStep{Floor: 0, MaxSurge: 1, Admit: 4}},
		{name: "ready slots above minIdle are admitted, no more than are outdated",
			in:   RolloutInput{MinIdle: 2, MaxSlots: 100, Total: 12, BaseSlots: 12, ReadyFree: 10, Outdated: 3},
			want: RolloutStep{Floor: 2, MaxSurge: 1, Admit: 3}},
		{name: "minIdle 0: every ready slot may go, percents resolve to 0",
			in:   RolloutInput{MinIdle: 0, MaxSlots: 100, Total: 3, BaseSlots: 3, ReadyFree: 2, Outdated: 2},
			want: RolloutStep{Floor: 0, MaxSurge: 0, Admit: 2}},
		{name: "minIdle 0, nothing ready: nothing to do",
			in:   RolloutInput{MinIdle: 0, MaxSlots: 100, Total: 3, BaseSlots: 3, ReadyFree: 0, Outdated: 0},
			want: RolloutStep{Floor: 0, MaxSurge: 0}},
		{name: "nothing outdated left: no admission, no surge",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 13, BaseSlots: 10, ReadyFree: 13, Outdated: 0},
			want: RolloutStep{Floor: 10, MaxSurge: 3}},
		{name: "surge never past maxSlots",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 11, Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 1}},
		{name: "surge no larger than the outdated slots it replaces",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 1},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 1}},
		{name: "slots grown for bots are not surge",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 15, BaseSlots: 10, Needed: 15, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 3}},
		{name: "ready below the floor (bots took slots): surge, admit nothing",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Total: 10, BaseSlots: 10, Needed: 10, ReadyFree: 6, Outdated: 6},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 3}},
		{name: "maxSlots reached: one slot at a time below the floor",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 10, Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Admit: 1, NoRoom: true}},
		{name: "maxSlots reached, the one slot in flight: wait for it",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 10, Total: 10, BaseSlots: 10, ReadyFree: 9, Outdated: 9, InFlight: 1},
			want: RolloutStep{Floor: 10, MaxSurge: 3, NoRoom: true}},
		{name: "maxSlots lowered below the slots: no surge, one at a time",
			in:   RolloutInput{MinIdle: 5, MaxSlots: 8, Total: 12, BaseSlots: 12, ReadyFree: 5, Outdated: 5},
			want: RolloutStep{Floor: 5, MaxSurge: 2, Admit: 1, NoRoom: true}},
		{name: "maxSurge 0 and maxUnavailable 0: one at a time, or it would never end",
			in:   RolloutInput{MinIdle: 4, MaxSlots: 100, Strategy: strategy(0, 0), Total: 4, BaseSlots: 4, ReadyFree: 4, Outdated: 4},
			want: RolloutStep{Floor: 4, MaxSurge: 0, Admit: 1, NoRoom: true}},
		{name: "surge used up, none warming: one at a time",
			in:   RolloutInput{MinIdle: 4, MaxSlots: 100, Total: 5, BaseSlots: 4, ReadyFree: 4, Outdated: 3},
			want: RolloutStep{Floor: 4, MaxSurge: 1, Admit: 1, NoRoom: true}},
		{name: "a slot warming that will not lift readyFree above the floor: one at a time already",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 10, Total: 10, BaseSlots: 10, ReadyFree: 8, Outdated: 8, Warming: 1},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Admit: 1, NoRoom: true}},
		{name: "values the CRD refuses fall back to the defaults",
			in:   RolloutInput{MinIdle: 10, MaxSlots: 100, Strategy: strategy("many", -1), Total: 10, BaseSlots: 10, ReadyFree: 10, Outdated: 10},
			want: RolloutStep{Floor: 10, MaxSurge: 3, Surge: 3}},
	}
	for _, tt := range tests {
		if got := RolloutBudget(tt.in); got != tt.want {
			t.Errorf("%s:\n  rolloutBudget(%+v)\n  = %+v\n  want %+v", tt.name, tt.in, got, tt.want)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed manifests/*.yaml
var manifests embed.FS

// poolValues fill manifests/pool.yaml.
type poolValues struct {
	CoolifyURL, CoolifyToken                 string
	ProjectUUID, ServerUUID, EnvironmentName string
	// Servers lists the pool's servers when there are several (spec.coolify.servers instead
	// of serverUUID).
	Servers           []string
	Image, ImageTag   string
	MaxSlots, MinIdle int
	Standby           string
	Speed             float64
	// WebhookURL, when set, receives every bot's phases (spec.webhookDefaults), signed with
	// WebhookSecret (kept in the Secret demo-webhook) when that is set.
	WebhookURL, WebhookSecret string
}

// botValues fill manifests/bot.yaml.
type botValues struct {
	Name        string
	MeetingCode string
	Priority    int32
	StartTime   string
}

// meetings name the burst's bots; the priorities are what a team would plausibly give them.
var meetings = []struct {
	name     string
	priority int32
}{
	{"standup", 0}, {"customer-call", 50}, {"design-review", 0}, {"interview", 20},
	{"retro", -10}, {"sales-demo", 50}, {"planning", 0}, {"all-hands", 10},
	{"one-on-one", 0}, {"board-sync", 20}, {"support-escalation", 50}, {"brainstorm", -10},
}

// burst returns n bots with mixed priorities and, when scheduleIn > 0, one more bot scheduled
// that far in the future, with the highest priority: it joins the queue shortly before its
// start and takes the next free slot.
func burst(n int, scheduleIn time.Duration, rng *rand.Rand, now time.Time) []botValues {
	var bots []botValues
	for i := range n {
		m := meetings[i%len(meetings)]
		bots = append(bots, botValues{Name: fmt.Sprintf("%s-%02d", m.name, i+1), Priority: m.priority, MeetingCode: meetingCode(rng)})
	}
	if scheduleIn > 0 {
		bots = append(bots, botValues{Name: "weekly-review", Priority: 100, MeetingCode: meetingCode(rng),
			StartTime: now.Add(scheduleIn).UTC().Format(time.RFC3339)})
	}
	return bots
}

// meetingCode looks like a Google Meet code: abc-defg-hij.
func meetingCode(rng *rand.Rand) string {
	letters := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	return letters(3) + "-" + letters(4) + "-" + letters(3)
}

// render fills a manifest template and keeps the result in the demo directory, so what was
// applied can be read (and applied again with kubectl).
func render(dir, name string, values any) ([]byte, error) {
	tpl, err := template.ParseFS(manifests, "manifests/"+name+".yaml")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, values); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	return buf.Bytes(), os.WriteFile(filepath.Join(out, fileName(name, values)), buf.Bytes(), 0o644)
}

func fileName(name string, values any) string {
	if b, ok := values.(botValues); ok {
		return "bot-" + b.Name + ".yaml"
	}
	return name + ".yaml"
}

// apply creates every object of a multi-document YAML in namespace ns.
func apply(ctx context.Context, c client.Client, scheme *k8sruntime.Scheme, ns string, doc []byte) error {
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(doc)))
	for {
		part, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(stripComments(part))) == 0 {
			continue
		}
		obj, _, err := decoder.Decode(part, nil, nil)
		if err != nil {
			return fmt.Errorf("decoding manifest: %w", err)
		}
		o, ok := obj.(client.Object)
		if !ok {
			return fmt.Errorf("manifest of %T is not an object", obj)
		}
		o.SetNamespace(ns)
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, o.GetName(), err)
		}
	}
}

func stripComments(b []byte) []byte {
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

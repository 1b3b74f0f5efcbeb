package modelcheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

// Rollouts in the model (issue 17): at random moments a pool's template changes — a new tag
// (pushed to the simulator's registry first, so the pull is cold on every server), a revert to
// an earlier tag, new limits, the botpool.dev/restartedAt annotation with a new push of the
// same tag, and rarely a tag the registry lacks, which a later change reverts. Checked:
//
//	16: no slot's deployment pulls its image cold (the simulator's OnPull hook, the moment
//	    the pull starts), unless nothing the pool's status records as pulled on that server is
//	    still the image the registry serves there (a new pool or server: nothing warmer
//	    exists), or the registry moved the slot's own tag under it (a push of the same tag
//	    after the slot was given it, or one its pool never saw announced);
//	    at settle points, once the world is calm, every free slot carries its pool's template
//	    and the pool says SlotsUpdated True (or RollingOut for busy slots only), and no slot
//	    was given a tag the registry lacks.

// pullerPrefix starts the name of a pool's puller application (controllers/pool_pull.go): its
// deployments are the pre-pulls, the only ones allowed to pull cold.
const pullerPrefix = "botpool-pull-"

// templateRecord is what the checker remembers of the pools' templates and the registry. Its
// maps are read by the pull hook, which may run while the API server's lock is held (a check
// that lists deployments inside onWrite): it has its own lock and never calls the API server.
type templateRecord struct {
	mu sync.Mutex
	// pools are the pools as the API server holds them, kept from every write.
	pools map[string]*v1.BotPool
	// appPool is the pool of each slot application, from the slots' writes.
	appPool map[string]string
	// tags lists, per pool, the tags the registry has that it was on (for reverts).
	tags map[string][]string
	// bad is, per pool on a tag the registry lacks, the tag it came from (a later change
	// reverts to it).
	bad map[string]string
	// refs are the image references pools were on that the registry has: the pull-failure
	// fault hits them.
	refs map[string]bool
	// pushes holds, per image reference pushed again, the last such push.
	pushes map[string]push
	// repushed counts the pushes of a reference after its first.
	repushed map[string]int
	// evicted holds, per server and image reference, the simulator's order (Seq) of the last
	// run of Coolify's Docker cleanup that removed it from the server's cache (OnCleanup).
	evicted map[string]map[string]uint64
	// filled holds, per server and image reference, each pull that put it in the server's
	// cache, in order (the OnPulled hook): a pull that failed puts nothing back.
	filled  map[string]map[string][]filledAt
	changes int // names new tags and restartedAt values
}

func (t *templateRecord) init() {
	t.pools, t.appPool, t.tags, t.bad = map[string]*v1.BotPool{}, map[string]string{}, map[string][]string{}, map[string]string{}
	t.refs, t.pushes, t.repushed = map[string]bool{}, map[string]push{}, map[string]int{}
	t.evicted, t.filled = map[string]map[string]uint64{}, map[string]map[string][]filledAt{}
}

// filledAt is when, and in the simulator's order of events, a pull put its image in the cache.
type filledAt struct {
	at  time.Time
	seq uint64
}

// push is a new image pushed under a tag that existed, rolled out on purpose in one pool (its
// restartedAt annotation). The registry moves the tag under every application on it then, and
// under every other pool on it, which nobody told.
type push struct {
	pool  string          // the pool whose restartedAt announced it
	under map[string]bool // the applications on the tag at the push
	// restartedAt is the annotation that announced it, hash the template the pool's status
	// named then; seen says a pass of the pool since named a template of the tag under that
	// annotation: the pool knew. A pool moved to another tag before any pass saw the
	// annotation on the pushed tag cannot know which tag the push was of.
	restartedAt, hash string
	seen              bool
}

// movedUnder reports whether the registry moved ref under the application since it was given
// ref, or the pool did not know of the last push of ref. Callers hold t.mu.
func (t *templateRecord) movedUnder(ref, app, pool string) bool {
	p, pushed := t.pushes[ref]
	return pushed && (p.under[app] || p.pool != pool || !p.seen)
}

// goodTag notes that the pool was on a tag the registry has. Callers hold t.mu.
func (t *templateRecord) goodTag(pool, image, tag string) {
	if tag == "" {
		tag = "latest"
	}
	if !slices.Contains(t.tags[pool], tag) {
		t.tags[pool] = append(t.tags[pool], tag)
	}
	t.refs[ref(image, tag)] = true
}

// poolWritten keeps the pool as the API server holds it now (nil: deleted), and logs what
// its status says of its template and images when that changed.
func (w *world) poolWritten(name string, n *v1.BotPool) {
	w.tpl.mu.Lock()
	old := w.tpl.pools[name]
	if n == nil {
		delete(w.tpl.pools, name)
	} else {
		w.tpl.pools[name] = n
		for r, p := range w.tpl.pushes {
			if p.pool == name && !p.seen && n.Status.TemplateImage == r && n.Status.TemplateHash != p.hash &&
				n.Annotations[v1.AnnotationRestartedAt] == p.restartedAt {
				p.seen = true
				w.tpl.pushes[r] = p
			}
		}
	}
	w.tpl.mu.Unlock()
	if before, after := describeImages(old), describeImages(n); before != after {
		w.log.add(fmt.Sprintf("%s MODEL pool %s: %s", w.clk.Now().Format("15:04:05.000"), name, after))
	}
}

// describeImages is a pool's template and images as its status records them, for the log.
func describeImages(p *v1.BotPool) string {
	if p == nil {
		return "gone"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "spec %s template %s (%s)", ref(p.Spec.Image, p.Spec.ImageTag), p.Status.TemplateHash, p.Status.TemplateImage)
	for _, st := range p.Status.Servers {
		fmt.Fprintf(&b, "; %s cached [", st.UUID)
		for i, c := range st.Cached {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(strings.TrimPrefix(c.Image, p.Spec.Image+":"))
			if c.RestartedAt != "" {
				b.WriteString("@" + c.RestartedAt)
			}
		}
		b.WriteString("]")
		if pl := st.Pull; pl != nil {
			fmt.Fprintf(&b, " pull %s %s %s", pl.State, strings.TrimPrefix(pl.Image, p.Spec.Image+":"), pl.DeploymentUUID)
		}
	}
	return b.String()
}

// slotImageWritten notes a slot's application and pool, and forgets that the registry moved
// a tag under an application the slot controller gave an image or a template since.
func (w *world) slotImageWritten(o, n *v1.BotPoolSlot) {
	if n == nil || n.Status.ApplicationUUID == "" {
		return
	}
	app := n.Status.ApplicationUUID
	w.tpl.mu.Lock()
	defer w.tpl.mu.Unlock()
	w.tpl.appPool[app] = n.Spec.Pool
	if o != nil && o.Status.ApplicationUUID == app && (o.Status.Image != n.Status.Image || o.Status.TemplateHash != n.Status.TemplateHash) {
		for _, p := range w.tpl.pushes {
			delete(p.under, app)
		}
	}
}

func ref(image, tag string) string {
	if tag == "" {
		tag = "latest"
	}
	return image + ":" + tag
}

// splitRef splits image:tag at the tag's colon.
func splitRef(r string) (image, tag string) {
	i := strings.LastIndex(r, ":")
	if i < 0 || strings.Contains(r[i:], "/") {
		return r, "latest"
	}
	return r[:i], r[i+1:]
}

// changeTemplate changes one pool's template as its owner might; a pool on a tag the registry
// lacks is reverted. The new spec reaches the cache at once, as in resizePool.
func (w *world) changeTemplate() bool {
	i := w.rng.IntN(len(w.pools))
	p := w.api.get(w.api.keyOf(w.pools[i])).(*v1.BotPool).DeepCopy()
	t := &w.tpl
	image, cur := p.Spec.Image, p.Spec.ImageTag
	if cur == "" {
		cur = "latest"
	}
	t.mu.Lock()
	prev, onBad := t.bad[p.Name]
	if !onBad {
		t.goodTag(p.Name, image, cur)
	}
	t.mu.Unlock()
	var kind, what string
	switch r := w.rng.IntN(100); {
	case onBad:
		p.Spec.ImageTag = prev
		kind, what = "revert a missing tag", "revert the missing tag "+cur+" to "+prev
		t.mu.Lock()
		delete(t.bad, p.Name)
		t.mu.Unlock()
	case r < 35:
		kind, what = "new tag", "new tag "+w.newTag(p)
	case r < 55:
		var earlier []string
		t.mu.Lock()
		for _, tag := range t.tags[p.Name] {
			if tag != cur {
				earlier = append(earlier, tag)
			}
		}
		t.mu.Unlock()
		if len(earlier) == 0 {
			kind, what = "new tag", "new tag "+w.newTag(p)
			break
		}
		p.Spec.ImageTag = earlier[w.rng.IntN(len(earlier))]
		kind, what = "revert", "revert to tag "+p.Spec.ImageTag
	case r < 75:
		res := p.Spec.Resources
		for res == p.Spec.Resources {
			res = v1.SlotResources{CPUs: []string{"", "1", "2"}[w.rng.IntN(3)], Memory: []string{"", "2g", "4096m"}[w.rng.IntN(3)]}
		}
		p.Spec.Resources = res
		kind, what = "resources", fmt.Sprintf("resources cpus=%q memory=%q", res.CPUs, res.Memory)
	case r < 94:
		kind, what = "restartedAt", w.pushAgain(p)
	default:
		t.mu.Lock()
		t.changes++
		tag := fmt.Sprintf("missing-%d", t.changes)
		t.bad[p.Name] = cur
		t.mu.Unlock()
		w.sim.FailPulls(ref(image, tag), -1) // the registry lacks it: every pull fails
		p.Spec.ImageTag = tag
		kind, what = "missing tag", "tag "+tag+", which the registry lacks"
	}
	must(w.api.Update(w.ctx, p))
	w.cache.sync(w.api.keyOf(p))
	*w.pools[i] = *p.DeepCopy()
	t.mu.Lock()
	if _, bad := t.bad[p.Name]; !bad {
		t.goodTag(p.Name, image, p.Spec.ImageTag)
	}
	t.mu.Unlock()
	w.detail = p.Name + " " + what
	w.counts["template change: "+kind]++
	return true
}

// pushAgain pushes a new image under the pool's tag and sets the pool's restartedAt
// annotation, to roll it out on purpose: the applications on the tag now pull the new image
// at their next deployment, whatever the operator does, and so do the other pools on it.
func (w *world) pushAgain(p *v1.BotPool) string {
	r := ref(p.Spec.Image, p.Spec.ImageTag)
	under := map[string]bool{}
	for _, a := range w.sim.Apps() {
		if a.Image == r && !strings.HasPrefix(a.Name, pullerPrefix) {
			under[a.UUID] = true
		}
	}
	image, tag := splitRef(r)
	w.sim.PushImage(image, tag)
	w.tpl.mu.Lock()
	w.tpl.changes++
	restarted := fmt.Sprintf("%s-%d", w.clk.Now().UTC().Format(time.RFC3339), w.tpl.changes)
	w.tpl.pushes[r] = push{pool: p.Name, under: under, restartedAt: restarted, hash: p.Status.TemplateHash}
	w.tpl.repushed[r]++
	w.tpl.mu.Unlock()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[v1.AnnotationRestartedAt] = restarted
	return "restartedAt " + restarted + " after a new push of " + r
}

// newTag pushes a new tag of the pool's image to the registry and puts the pool on it.
func (w *world) newTag(p *v1.BotPool) string {
	w.tpl.mu.Lock()
	w.tpl.changes++
	tag := fmt.Sprintf("v%d", w.tpl.changes)
	w.tpl.mu.Unlock()
	w.sim.PushImage(p.Spec.Image, tag)
	p.Spec.ImageTag = tag
	return tag
}

// pullRefs are the references the pull-failure fault hits: each platform's latest and every
// tag a pool was on that the registry has.
func (w *world) pullRefs() []string {
	out := map[string]bool{}
	for _, img := range w.images {
		out[ref(img, "")] = true
	}
	w.tpl.mu.Lock()
	for r := range w.tpl.refs {
		out[r] = true
	}
	w.tpl.mu.Unlock()
	refs := make([]string, 0, len(out))
	for r := range out {
		refs = append(refs, r)
	}
	slices.Sort(refs)
	return refs
}

// revertBadTags puts every pool on a tag the registry lacks back on the tag it came from (the
// end of a run: every rollout must be able to end).
func (w *world) revertBadTags() {
	for i, p := range w.pools {
		w.tpl.mu.Lock()
		prev, bad := w.tpl.bad[p.Name]
		delete(w.tpl.bad, p.Name)
		w.tpl.mu.Unlock()
		if !bad {
			continue
		}
		live := w.api.get(w.api.keyOf(p)).(*v1.BotPool).DeepCopy()
		live.Spec.ImageTag = prev
		must(w.api.Update(w.ctx, live))
		w.cache.sync(w.api.keyOf(live))
		*w.pools[i] = *live.DeepCopy()
		w.note("revert " + p.Name + " to tag " + prev)
	}
}

// cleaned is the simulator's OnCleanup hook: it records what a run of a server's Docker cleanup
// removed, which a slot may then pull cold until its pool pulled it again (invariant 16).
func (w *world) cleaned(c sim.CleanupInfo) {
	w.counts["docker cleanup run: "+c.Reason]++
	w.tpl.mu.Lock()
	defer w.tpl.mu.Unlock()
	if w.tpl.evicted[c.ServerUUID] == nil {
		w.tpl.evicted[c.ServerUUID] = map[string]uint64{}
	}
	for _, ref := range c.Evicted {
		w.tpl.evicted[c.ServerUUID][ref] = c.Seq
	}
}

// pulled is the simulator's OnPulled hook: a pull put its image back in the server's cache.
func (w *world) pulled(p sim.PullInfo) {
	w.tpl.mu.Lock()
	defer w.tpl.mu.Unlock()
	if w.tpl.filled[p.ServerUUID] == nil {
		w.tpl.filled[p.ServerUUID] = map[string][]filledAt{}
	}
	w.tpl.filled[p.ServerUUID][p.Ref] = append(w.tpl.filled[p.ServerUUID][p.Ref], filledAt{at: p.At, seq: p.Seq})
}

// removedByCleanup reports whether Coolify's Docker cleanup removed ref from the server since
// the pull the pool recorded as finished at pulledAt: its last run that removed ref came after
// the last pull that put ref in the cache by then. A pull that started by then and failed puts
// nothing back (seed 847380336291706). The pool cannot see such a run unless it is one of the
// server's scheduled ones, and pulls ref again only after those (docs/pools-and-slots.md,
// "Image pre-pull"). Callers hold t.mu.
func (t *templateRecord) removedByCleanup(server, ref string, pulledAt time.Time) bool {
	removed, ok := t.evicted[server][ref]
	if !ok {
		return false
	}
	// pulledAt went through the API server, which keeps whole seconds: the pull it records
	// may have ended up to a second after it (seeds 3236169675925491, 857066198271254).
	var last filledAt
	for _, f := range t.filled[server][ref] {
		if !f.at.Before(pulledAt.Add(time.Second)) {
			break
		}
		last = f
	}
	return last.seq != 0 && removed > last.seq
}

// pullStarted is the simulator's OnPull hook: invariant 16 at the moment a slot's deployment
// starts its pull. It reads only the record and the simulator (see templateRecord).
func (w *world) pullStarted(p sim.PullInfo) {
	if strings.HasPrefix(p.AppName, pullerPrefix) {
		w.counts[fmt.Sprintf("pre-pull started (cold %v)", p.Cold)]++
		return
	}
	if !p.Cold {
		w.counts["slot deployment pulls warm"]++
		return
	}
	w.tpl.mu.Lock()
	name := w.tpl.appPool[p.AppUUID]
	pool := w.tpl.pools[name]
	moved := w.tpl.movedUnder(p.Ref, p.AppUUID, name)
	var cached []v1.CachedImage
	if pool != nil {
		for _, st := range pool.Status.Servers {
			if st.UUID == p.ServerUUID {
				cached = st.Cached
			}
		}
	}
	repushed := maps.Clone(w.tpl.repushed)
	removed := map[string]bool{} // of the images cached lists, those a cleanup removed since the pull it records
	for _, c := range cached {
		removed[c.Image] = w.tpl.removedByCleanup(p.ServerUUID, c.Image, c.PulledAt.Time)
	}
	w.tpl.mu.Unlock()
	switch {
	case pool == nil:
		w.violate("invariant 16: the deployment %s of application %s (%s) pulled %s cold on server %s, and no pool's slot holds that application",
			p.DeploymentUUID, p.AppName, p.AppUUID, p.Ref, p.ServerUUID)
		return
	case moved:
		// The tag the slot was given was pushed again since, or for another pool: any
		// deployment of it pulls the new image until a pull of the push ends there
		// (docs/rollouts.md, "Mutable tags").
		w.counts["slot deployment pulls cold: its tag was pushed again under it"]++
		return
	}
	if removed[p.Ref] {
		w.counts["slot deployment pulls cold: Coolify's Docker cleanup removed its image from the server"]++
		return
	}
	var warm []string
	for _, c := range cached {
		image, tag := splitRef(c.Image)
		d, ok := w.sim.CachedImage(p.ServerUUID, image, tag)
		if !ok && removed[c.Image] {
			continue
		}
		if (ok && d == w.sim.ImageDigest(image, tag)) || repushed[c.Image] == 0 {
			// Still the registry's image there; or never pushed again, so the status claims a
			// pull the server does not hold: that is the pool's error, not an excuse.
			warm = append(warm, c.Image)
		}
	}
	if len(warm) == 0 {
		w.counts["slot deployment pulls cold: nothing its pool pulled on the server is warm"]++
		return
	}
	w.violate("invariant 16: slot %s's deployment %s pulled %s cold on server %s, where pool %s's status records finished pulls of %v",
		p.AppName, p.DeploymentUUID, p.Ref, p.ServerUUID, name, warm)
}

// rolloutPending reports whether a pool whose rollout can end (rollsOut) has not finished it
// yet: a settle point waits for it.
func (w *world) rolloutPending() bool {
	slots := w.liveSlots()
	for _, p := range w.pools {
		if !w.rollsOut(p) {
			continue
		}
		if w.rolloutLeft(w.api.get(w.api.keyOf(p)).(*v1.BotPool), slots) != "" {
			return true
		}
	}
	return false
}

// backoffRounds bounds the settle rounds (of 15 s) that wait out pull back-offs: the longest
// back-off, 30 minutes (docs/pools-and-slots.md, "Retry").
const backoffRounds = 30 * 60 / 15

// pullBackingOff reports whether a pool whose rollout is pending waits out the back-off of a
// failed pull on one of its servers: the retry is due pullBackoff after the failure, 2
// minutes after the first in a row, doubled after each further one, 30 at most.
func (w *world) pullBackingOff() bool {
	slots := w.liveSlots()
	now := w.clk.Now()
	for _, sp := range w.pools {
		p := w.api.get(w.api.keyOf(sp)).(*v1.BotPool)
		if !w.rollsOut(p) || w.rolloutLeft(p, slots) == "" {
			continue
		}
		for _, st := range p.Status.Servers {
			if pl := st.Pull; pl != nil && pl.State == v1.ImagePullFailed && now.Before(pl.Since.Add(pullBackoff(pl.Failures))) {
				return true
			}
		}
	}
	return false
}

// pullBackoff is the documented wait after failures pulls of an image failed in a row.
func pullBackoff(failures int32) time.Duration {
	d := 2 * time.Minute
	for i := int32(1); i < failures && d < 30*time.Minute; i++ {
		d *= 2
	}
	return min(d, 30*time.Minute)
}

// rollsOut reports whether the pool's rollout can end once the world is calm: it is on a tag
// the registry has, and its pre-pulls may take as long as a cold pull. A pre-pull is cancelled
// at the pool's deploymentTimeout (docs/pools-and-slots.md, "Image pre-pull"), and the model
// shortens it to 6 minutes for some pools, below the simulator's 7-minute cold pull: such a
// pool stalls on any image its servers do not hold yet, by design.
func (w *world) rollsOut(p *v1.BotPool) bool {
	return !w.onBadTag(p.Name) && p.Spec.Timing.DeploymentTimeout.OrDefault(v1.DefaultDeploymentTimeout) >= sim.DefaultColdPull+sim.DefaultComposeUp
}

func (w *world) onBadTag(pool string) bool {
	w.tpl.mu.Lock()
	defer w.tpl.mu.Unlock()
	_, bad := w.tpl.bad[pool]
	return bad
}

// rolloutLeft says what is left of a calm pool's rollout, "" when it is over: the pool names
// its spec's image, every free slot carries its template, and SlotsUpdated is True, or False
// only for busy slots, which follow their bots.
func (w *world) rolloutLeft(p *v1.BotPool, slots []v1.BotPoolSlot) string {
	want := ref(p.Spec.Image, p.Spec.ImageTag)
	if p.Status.TemplateImage != want || p.Status.TemplateHash == "" {
		return fmt.Sprintf("the pool names template %q (%s), its spec %s", p.Status.TemplateHash, p.Status.TemplateImage, want)
	}
	var free, busy []string
	for i := range slots {
		s := &slots[i]
		if s.Spec.Pool != p.Name || !s.DeletionTimestamp.IsZero() || s.Status.TemplateHash == p.Status.TemplateHash {
			continue
		}
		if s.Spec.BotRef != nil {
			busy = append(busy, s.Name)
		} else {
			free = append(free, fmt.Sprintf("%s (%s, %s, template %q)", s.Name, s.Status.Phase, s.Status.Image, s.Status.TemplateHash))
		}
	}
	if len(free) > 0 {
		return fmt.Sprintf("free slots %v are not on template %s (%s)", free, p.Status.TemplateHash, want)
	}
	c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionSlotsUpdated)
	switch {
	case c == nil:
		return "the pool has no SlotsUpdated condition"
	case c.Status == metav1.ConditionTrue:
		return ""
	case c.Reason == v1.ReasonRollingOut && len(busy) > 0:
		return "" // busy slots follow when their bots end
	case c.Reason == v1.ReasonNoUsableServer && !usesAnyServer(p):
		return "" // nowhere to pull: it resumes when a server is back
	}
	return fmt.Sprintf("SlotsUpdated is %s (%s: %s) with busy slots %v outdated", c.Status, c.Reason, c.Message, busy)
}

// checkRolloutSettled is 16 at a settle point: a calm pool's rollout is over, and a pool on a
// tag the registry lacks gave it to no slot and does not call itself up to date.
func (w *world) checkRolloutSettled(when string) {
	slots := w.liveSlots()
	for _, sp := range w.pools {
		p := w.api.get(w.api.keyOf(sp)).(*v1.BotPool)
		if w.rollsOut(p) {
			if left := w.rolloutLeft(p, slots); left != "" {
				w.violate("invariant 16 (%s): pool %s's rollout does not end with the world calm: %s", when, p.Name, left)
			}
			continue
		}
		if !w.onBadTag(p.Name) {
			w.counts["settle: a pool whose pre-pull times out before a cold pull ends (not checked)"]++
			continue
		}
		bad := ref(p.Spec.Image, p.Spec.ImageTag)
		for _, s := range slots {
			if s.Spec.Pool != p.Name || s.Status.Image != bad {
				continue
			}
			server := slotServerOf(&s, p)
			if pulledNothing(p, server) {
				// Nothing warmer there: a new slot takes the spec's image (createImage), and
				// fails; the pool says so.
				w.counts["settle: a slot on a missing tag where its pool pulled nothing"]++
				continue
			}
			w.violate("invariant 16 (%s): slot %s was given %s, a tag the registry lacks, on server %s, where pool %s pulled %v",
				when, s.Name, bad, server, p.Name, cachedImages(p, server))
		}
		if meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionSlotsUpdated) {
			w.violate("invariant 16 (%s): pool %s is on %s, which no server can pull, yet says SlotsUpdated True", when, p.Name, bad)
		}
	}
}

// cachedImages lists what the pool's status records as pulled on the server.
func cachedImages(p *v1.BotPool, server string) []string {
	var out []string
	for _, st := range p.Status.Servers {
		if st.UUID == server {
			for _, c := range st.Cached {
				out = append(out, c.Image)
			}
		}
	}
	return out
}

// usesAnyServer reports whether some server of the pool is neither cordoned nor out, as the
// pool's status saw it.
func usesAnyServer(p *v1.BotPool) bool {
	for _, srv := range p.Spec.Coolify.ServerList() {
		if srv.Cordoned {
			continue
		}
		out := false
		for _, st := range p.Status.Servers {
			if st.UUID == srv.UUID && st.Health.Out() {
				out = true
			}
		}
		if !out {
			return true
		}
	}
	return false
}

// pulledNothing reports whether the pool's status records no finished pull on the server.
func pulledNothing(p *v1.BotPool, server string) bool { return len(cachedImages(p, server)) == 0 }

// TestRemovedByCleanup: the excuse of invariant 16 for a cold pull after Coolify's Docker
// cleanup. The pull a pool records counts from the last pull that filled the cache by then,
// its pulledAt in whole seconds as the API server keeps it; a pull that failed fills nothing.
func TestRemovedByCleanup(t *testing.T) {
	at := time.Date(2026, 3, 5, 5, 49, 34, 0, time.UTC)
	var r templateRecord
	r.init()
	r.filled["srv"] = map[string][]filledAt{"bot:v1": {{at: at.Add(55 * time.Millisecond), seq: 10}, {at: at.Add(time.Hour), seq: 30}}}
	r.evicted["srv"] = map[string]uint64{"bot:v1": 20}
	for _, c := range []struct {
		pulledAt time.Time
		want     bool
	}{
		{at, true},                       // the fill at .055 is the pull recorded at :34
		{at.Add(-time.Second), false},    // nothing had filled the cache yet: no excuse
		{at.Add(2 * time.Hour), false},   // the later fill put the image back after the cleanup
		{at.Add(30 * time.Minute), true}, // the cleanup came after the last fill by then
	} {
		if got := r.removedByCleanup("srv", "bot:v1", c.pulledAt); got != c.want {
			t.Errorf("pulled at %s: removed = %v, want %v", c.pulledAt.Format(time.TimeOnly), got, c.want)
		}
	}
	if r.removedByCleanup("other", "bot:v1", at) || r.removedByCleanup("srv", "bot:v2", at) {
		t.Error("removed on a server or of an image no cleanup touched")
	}
}

// TestSettleWaitsOutAPullBackoff: a pool whose pull of its new tag failed four times in a row
// retries it 16 minutes after the last failure (docs/pools-and-slots.md, "Retry"); while it
// waits, a settle does not count the rollout's time (seed 4367750540162643 ran out of it).
func TestSettleWaitsOutAPullBackoff(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	image := s.w.images[string(v1.PlatformZoom)]
	s.w.sim.FailPulls(ref(image, "2"), 4)
	s.newTag("2")
	pull := func() *v1.ImagePull {
		p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool)
		return p.Status.Servers[0].Pull
	}
	for range 2000 {
		s.pool("solo")
		if p := pull(); p != nil && p.State == v1.ImagePullFailed && p.Failures == 4 {
			break
		}
		s.advance(15 * time.Second)
	}
	p := pull()
	if p == nil || p.State != v1.ImagePullFailed || p.Failures != 4 {
		t.Fatalf("pull after four injected failures: %+v", p)
	}
	if !s.w.pullBackingOff() {
		t.Fatalf("the pool waits out its pull back-off until %s, and the settle does not see it", p.Since.Add(16*time.Minute))
	}
	s.w.clk.Step(16*time.Minute + time.Second)
	if s.w.pullBackingOff() {
		t.Fatal("the back-off is over, and the settle still waits it out")
	}
}

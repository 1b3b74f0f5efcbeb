package coolifyview

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// PoolTagOf is the Coolify tag every application of a pool carries: one GET /applications?tag=
// lists them all.
// The tag is readable (the pool's name) and unique (a hash of namespace and name): names
// alone collide across namespaces ("a"/"b-c" and "a-b"/"c"), and two pools sharing a tag would
// adopt or delete each other's applications.
func PoolTagOf(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.ToLower("botpool-" + name + "-" + hex.EncodeToString(sum[:5]))
}

// ClusterPoolTag is the Coolify tag of a pool's applications when this cluster has an
// identity: the cluster, the namespace and the pool's name all go into the hash, so two
// clusters (staging and production) with the same namespace and pool on one Coolify team never
// list, adopt or delete each other's applications. Without an identity it is the legacy tag.
func ClusterPoolTag(cluster, namespace, name string) string {
	if cluster == "" {
		return PoolTagOf(namespace, name)
	}
	sum := sha256.Sum256([]byte(cluster + "\x00" + namespace + "/" + name))
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.ToLower("botpool-" + name + "-" + hex.EncodeToString(sum[:5]))
}

// OwnerMark is what the operator puts at the end of every description it writes on a slot's
// application: the tag and a hash of the placement (project and server). Coolify's list
// answers carry neither tags nor project or server uuids, and older servers ignore the tag
// filter, so this mark is how the operator checks on its own side that an application is its
// own before it adopts or deletes one.
func OwnerMark(tag string, pool *v1.BotPool, server string) string {
	sum := sha256.Sum256([]byte(pool.Spec.Coolify.ProjectUUID + "/" + server))
	return " {" + tag + "@" + hex.EncodeToString(sum[:3]) + "}"
}

// Marked appends the owner mark to a description, cutting the description so the whole stays
// within Coolify's 255 characters.
func Marked(desc, mark string) string {
	return v1.Truncate(desc, MaxDescription-len(mark)) + mark
}

// MaxDescription is Coolify's limit on an application's description (longer ones answer 500).
const MaxDescription = 255

// CarriesTag reports whether the application's description carries the owner mark of tag,
// whatever the placement: the orphan sweep's check that the list filter was honoured.
func CarriesTag(app *coolify.Application, tag string) bool {
	return strings.Contains(app.Description, " {"+tag+"@")
}

// Adoptable reports whether an application found under the slot's name is the one this slot
// created: it carries the exact owner mark (cluster, namespace, pool, project and server) and
// runs the pool's image, the one a new slot on that server is created with mid-rollout
// (CreateImage), or another image the pool's status lists as pulled there: CreateImage's
// answer when the create went out, which a pull that finished since may have changed. (The
// model check found a create whose answer was lost, then a pull finishing on the server, then
// a second application of the slot's name.) A same-named application of another cluster, pool
// or placement is never adopted.
func Adoptable(app *coolify.Application, tag string, pool *v1.BotPool, server string) bool {
	if !strings.HasSuffix(app.Description, OwnerMark(tag, pool, server)) {
		return false
	}
	got := app.DockerRegistryImageName + ":" + policy.TagOrLatest(app.DockerRegistryImageTag)
	image, imageTag := policy.CreateImage(pool, server)
	if got == pool.Spec.Image+":"+policy.TagOrLatest(pool.Spec.ImageTag) || got == image+":"+policy.TagOrLatest(imageTag) {
		return true
	}
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == server {
			return slices.ContainsFunc(st.Cached, func(c v1.CachedImage) bool { return c.Image == got })
		}
	}
	return false
}

package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// ServerSpec seeds a server.
type ServerSpec struct {
	UUID string
	Name string
	IP   string
	// ConcurrentBuilds defaults to 2, DeploymentQueueLimit to 25.
	ConcurrentBuilds     int
	DeploymentQueueLimit int
	// Destinations default to one standalone "coolify" network.
	Destinations []DestinationSpec
}

// DestinationSpec seeds a Docker network destination.
type DestinationSpec struct {
	UUID    string
	Name    string
	Network string
}

// ProjectSpec seeds a project with its environments.
type ProjectSpec struct {
	UUID         string
	Name         string
	Environments []EnvironmentSpec
}

// EnvironmentSpec seeds an environment.
type EnvironmentSpec struct {
	UUID string
	Name string
}

type server struct {
	ServerSpec
	id      int
	created time.Time
	// images is the image cache: the digest pulled on this server per image reference. A
	// pull is cold when the registry's digest of the reference differs (PushImage).
	images map[string]string

	// What Coolify's own checks say of the server (health.go); the zero value is healthy.
	unreachable bool
	unusable    bool
	downSince   time.Time // when it stopped being functional; zero while it is
	// orphans are containers of applications deleted while the server was not functional:
	// Coolify dropped the application but could not remove its container.
	orphans []*app

	// cleanup are its Docker cleanup settings (cleanup.go); cleanupGen counts their changes,
	// so a run scheduled under older ones does nothing.
	cleanup    DockerCleanup
	cleanupGen int
}

type project struct {
	ProjectSpec
	id     int
	envIDs []int
}

type token struct {
	user      string
	abilities map[string]bool
}

// AddServer seeds a server and returns its uuid.
func (s *Sim) AddServer(spec ServerSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.UUID == "" {
		spec.UUID = s.uuid()
	}
	if spec.Name == "" {
		spec.Name = "server-" + spec.UUID
	}
	if spec.IP == "" {
		spec.IP = "10.0.0.1"
	}
	if spec.ConcurrentBuilds <= 0 {
		spec.ConcurrentBuilds = DefaultConcurrent
	}
	if spec.DeploymentQueueLimit <= 0 {
		spec.DeploymentQueueLimit = DefaultQueueLimit
	}
	if len(spec.Destinations) == 0 {
		spec.Destinations = []DestinationSpec{{Name: "coolify", Network: "coolify"}}
	}
	for i := range spec.Destinations {
		if spec.Destinations[i].UUID == "" {
			spec.Destinations[i].UUID = s.uuid()
		}
	}
	srv := &server{ServerSpec: spec, id: s.id(), created: s.clk.Now(), images: map[string]string{}, cleanup: defaultDockerCleanup()}
	s.servers[spec.UUID] = srv
	s.scheduleCleanup(srv, s.clk.Now())
	return spec.UUID
}

// AddProject seeds a project; environments default to one named "production".
func (s *Sim) AddProject(spec ProjectSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.UUID == "" {
		spec.UUID = s.uuid()
	}
	if len(spec.Environments) == 0 {
		spec.Environments = []EnvironmentSpec{{Name: "production"}}
	}
	p := &project{ProjectSpec: spec, id: s.id()}
	for i := range p.Environments {
		if p.Environments[i].UUID == "" {
			p.Environments[i].UUID = s.uuid()
		}
		p.envIDs = append(p.envIDs, s.id())
	}
	s.projects[spec.UUID] = p
	return spec.UUID
}

// AddToken registers a bearer token ("<id>|<secret>") of user with abilities ("read",
// "write", "deploy", "read:sensitive", "root"). Tokens of one user share its rate limit.
func (s *Sim) AddToken(tok, user string, abilities ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &token{user: user, abilities: map[string]bool{}}
	for _, a := range abilities {
		t.abilities[a] = true
	}
	s.tokens[tok] = t
}

// RevokeToken makes a token answer 401, like an expired one.
func (s *Sim) RevokeToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, tok)
}

// WarmImage puts an image in a server's cache, as if pulled earlier (tag "" is "latest"): the
// registry's current digest of it, so its next deployment there pulls warm.
func (s *Sim) WarmImage(serverUUID, image, tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv := s.servers[serverUUID]; srv != nil {
		ref := imageRef(image, tag)
		srv.images[ref] = s.digest(ref)
	}
}

// PushImage pushes a new image under image:tag (tag "" is "latest"), as a CI job pushing the
// same tag again does, and returns its digest. Servers keep the digest they pulled, so the
// next deployment of the reference on each server pulls cold: a tag is not a version.
func (s *Sim) PushImage(image, tag string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := imageRef(image, tag)
	s.registry[ref]++
	return s.digest(ref)
}

// ImageDigest is the registry's current digest of image:tag (tag "" is "latest").
func (s *Sim) ImageDigest(image, tag string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.digest(imageRef(image, tag))
}

// CachedImage is the digest of image:tag in a server's cache, and whether it is there. It
// panics for a server that was never added.
func (s *Sim) CachedImage(serverUUID, image, tag string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.mustServer(serverUUID).images[imageRef(image, tag)]
	return d, ok
}

// digest is the registry's digest of ref: every reference exists, and each push changes it.
// Callers hold s.mu.
func (s *Sim) digest(ref string) string {
	sum := sha256.Sum256([]byte(ref + "\x00" + strconv.Itoa(s.registry[ref])))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SetServerCapacity changes a server's concurrent_builds and deployment_queue_limit, as
// PATCH /servers/{uuid} does (values below 1 are left as they are).
func (s *Sim) SetServerCapacity(serverUUID string, concurrentBuilds, queueLimit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv := s.servers[serverUUID]; srv != nil {
		if concurrentBuilds >= 1 {
			srv.ConcurrentBuilds = concurrentBuilds
		}
		if queueLimit >= 1 {
			srv.DeploymentQueueLimit = queueLimit
		}
	}
}

// Fixture names what SeedDefault created.
type Fixture struct {
	ServerUUID      string
	DestinationUUID string
	ProjectUUID     string
	EnvironmentUUID string
	EnvironmentName string
	Token           string
}

// DefaultToken is the token SeedDefault registers (all of read, write, deploy).
const DefaultToken = "1|botpool-sim-token"

// SeedDefault creates one server with one destination, one project with a "production"
// environment and DefaultToken for user "ops": enough for a pool.
func (s *Sim) SeedDefault() Fixture {
	srv := s.AddServer(ServerSpec{UUID: "srv-1", Name: "localhost"})
	prj := s.AddProject(ProjectSpec{UUID: "prj-1", Name: "bots", Environments: []EnvironmentSpec{{UUID: "env-1", Name: "production"}}})
	s.AddToken(DefaultToken, "ops", "read", "write", "deploy")
	s.mu.Lock()
	dst := s.servers[srv].Destinations[0].UUID
	s.mu.Unlock()
	return Fixture{ServerUUID: srv, DestinationUUID: dst, ProjectUUID: prj, EnvironmentUUID: "env-1",
		EnvironmentName: "production", Token: DefaultToken}
}

// imageRef is the reference a server caches: image plus tag, "latest" by default.
func imageRef(image, tag string) string {
	if tag == "" {
		if strings.Contains(lastSegment(image), ":") {
			return image
		}
		tag = "latest"
	}
	return image + ":" + tag
}

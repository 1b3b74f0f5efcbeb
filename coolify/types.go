package coolify

// Server is a machine Coolify deploys to.
type Server struct {
	UUID     string         `json:"uuid"`
	Name     string         `json:"name"`
	IP       string         `json:"ip,omitempty"`
	Settings ServerSettings `json:"settings"`
}

// ServerSettings are the capacity knobs of a server and what Coolify's own checks say of it.
type ServerSettings struct {
	// ConcurrentBuilds is how many deployments the server runs at once (default 2).
	ConcurrentBuilds int `json:"concurrent_builds"`
	// DeploymentQueueLimit is how many may be queued (default 25).
	DeploymentQueueLimit int `json:"deployment_queue_limit"`
	// IsReachable is false when Coolify's last SSH check of the server failed; IsUsable is
	// false when the server is unreachable or its Docker does not answer. Coolify checks about
	// once a minute, so both lag the server. Nil when the answer lacks the field: unknown, not
	// down (Functional).
	IsReachable *bool `json:"is_reachable,omitempty"`
	IsUsable    *bool `json:"is_usable,omitempty"`
}

// Functional is what Coolify asks before every deployment and stop: a server that is not
// functional fails the deployments a worker takes and ignores stops. A health Coolify did not
// report counts as functional, so a missing field never takes a server out.
func (s ServerSettings) Functional() bool {
	return (s.IsReachable == nil || *s.IsReachable) && (s.IsUsable == nil || *s.IsUsable)
}

// Project groups environments.
type Project struct {
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// Environment is a project's environment.
type Environment struct {
	UUID string `json:"uuid"`
	Name string `json:"name"`
}

// Destination is a Docker network on a server.
type Destination struct {
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	Network    string `json:"network"`
	ServerUUID string `json:"server_uuid,omitempty"`
}

// Application is the part of Coolify's application object a pool reads.
type Application struct {
	UUID                    string `json:"uuid"`
	Name                    string `json:"name"`
	Description             string `json:"description,omitempty"`
	Status                  string `json:"status"`
	DockerRegistryImageName string `json:"docker_registry_image_name,omitempty"`
	DockerRegistryImageTag  string `json:"docker_registry_image_tag,omitempty"`
	BuildPack               string `json:"build_pack,omitempty"`
	// LimitsCPUs and LimitsMemory are the container's limits as set: the server reports an
	// unset limit as NoLimit. A change applies at the next deployment (Limits).
	LimitsCPUs   string `json:"limits_cpus,omitempty"`
	LimitsMemory string `json:"limits_memory,omitempty"`
	CreatedAt    string `json:"created_at,omitempty"`
	UpdatedAt    string `json:"updated_at,omitempty"`
}

// NoLimit is the limits_cpus or limits_memory value that sets no limit: the server's default,
// reported for an application created without one.
const NoLimit = "0"

// Limits returns the application's limits, "" for none (NoLimit or absent), so they compare
// with a spec that leaves a limit out.
func (a *Application) Limits() (cpus, memory string) {
	none := func(v string) string {
		if v == NoLimit {
			return ""
		}
		return v
	}
	return none(a.LimitsCPUs), none(a.LimitsMemory)
}

// State is the container state of the application's status.
func (a *Application) State() State { s, _ := ParseStatus(a.Status); return s }

// Health is the health part of the application's status.
func (a *Application) Health() Health { _, h := ParseStatus(a.Status); return h }

// CreateApplicationRequest is what a pool sends to create a slot's docker-image application.
// The client always adds instant_deploy=false and, where the server accepts it,
// autogenerate_domain=false.
type CreateApplicationRequest struct {
	ProjectUUID string
	ServerUUID  string
	// EnvironmentName or EnvironmentUUID: one is enough.
	EnvironmentName string
	EnvironmentUUID string
	// DestinationUUID is needed only when the server has more than one destination.
	DestinationUUID string
	// Image may carry a registry host; Tag defaults to "latest" on the server.
	Image string
	Tag   string
	// PortsExposes defaults to "3000": servers before v4.1.2 require it.
	PortsExposes string
	Name         string
	// Description must stay within 255 characters (the server answers 500 otherwise).
	Description  string
	LimitsCPUs   string
	LimitsMemory string
	// Tags are sent only to servers from v4.2.0 on.
	Tags []string
}

// AppUpdate is what UpdateApplication changes: the image an application deploys and its
// limits. An empty field is left as it is; NoLimit removes a limit. The server stores the
// change at once and applies it at the application's next deployment only: the running
// container keeps what it was started with.
type AppUpdate struct {
	// Image is docker_registry_image_name (it may carry a registry host); Tag is
	// docker_registry_image_tag.
	Image string
	Tag   string
	// CPUs is limits_cpus (e.g. "1.5"), Memory limits_memory (e.g. "2048m"); Docker refuses a
	// value it cannot read, and the deployment then fails at compose up.
	CPUs   string
	Memory string
}

// EnvVar is an application environment variable.
type EnvVar struct {
	UUID        string `json:"uuid,omitempty"`
	Key         string `json:"key"`
	Value       string `json:"value"`
	IsPreview   bool   `json:"is_preview"`
	IsLiteral   bool   `json:"is_literal,omitempty"`
	IsMultiline bool   `json:"is_multiline,omitempty"`
}

// DeleteOptions are the cleanup flags of DELETE /applications/{uuid}.
type DeleteOptions struct {
	DeleteConfigurations bool
	DeleteVolumes        bool
	// DockerCleanup runs Coolify's Docker cleanup of the whole server once the application is
	// gone: it prunes every image no container runs and no application's recent deployments
	// keep, whoever pulled it, not only the deleted application's.
	DockerCleanup           bool
	DeleteConnectedNetworks bool
}

// AppLeftovers deletes what the application itself left behind (its configuration, volumes
// and connected networks) and leaves the server's Docker alone: what a pool deletes with.
//
// Not DockerCleanup: the cleanup is server-wide, so one slot's delete would evict the images
// every other pool on that server (another tenant's, too) pre-pulled and has not run yet, and
// this pool's own freshly pulled image, and their next bots would pull cold, for minutes.
// Coolify's scheduled cleanup keeps the disk in check instead.
var AppLeftovers = DeleteOptions{DeleteConfigurations: true, DeleteVolumes: true, DeleteConnectedNetworks: true}

// DeployResult is the answer to a start, restart or deploy.
type DeployResult struct {
	// DeploymentUUID is empty when the server de-duplicated the request (a deployment of the
	// app is already queued or running): find it with ListApplicationDeployments(take=1).
	// After /start it may name a deployment that was never created (full queue): a later
	// GetDeployment answers ErrNotFound.
	DeploymentUUID string
	Message        string
}

// Deployment is a deployment record.
type Deployment struct {
	DeploymentUUID  string           `json:"deployment_uuid"`
	Status          DeploymentStatus `json:"status"`
	ApplicationID   string           `json:"application_id,omitempty"`
	ApplicationName string           `json:"application_name,omitempty"`
	ServerName      string           `json:"server_name,omitempty"`
	CreatedAt       string           `json:"created_at,omitempty"`
	UpdatedAt       string           `json:"updated_at,omitempty"`
	FinishedAt      string           `json:"finished_at,omitempty"`
	// Logs are sent only to a token with the read:sensitive ability (LogEntries,
	// LastErrorLine). With that ability every deployment in a list carries its logs too.
	Logs DeploymentLogs `json:"logs,omitzero"`
}

package coolify

import "context"

// API is the Coolify API this package's client speaks. *Client implements it; the controllers
// declare the narrower controllers.CoolifyAPI of the calls they make, which their fakes
// implement. Every method takes the caller's context; errors match the sentinels in errors.go
// with errors.Is.
//
// Retries: reads, patch, delete (env delete too), stop, cancel and the env bulk upsert (an upsert by key) are
// retried on 429, 5xx and transport errors. Create, deploy, start, restart and env create are
// retried only on a 429 rate limit, which the server sends before doing anything: after a 5xx
// or a lost answer the create may have happened, so the caller looks the object up (by name,
// or with ListApplicationDeployments) instead.
type API interface {
	// ServerVersion is GET /version, read once and cached (a bare string such as "4.3.11").
	ServerVersion(ctx context.Context) (string, error)
	// ListServers is GET /servers, with each server's capacity settings and health.
	ListServers(ctx context.Context) ([]Server, error)
	// ListProjects is GET /projects.
	ListProjects(ctx context.Context) ([]Project, error)
	// ListEnvironments is GET /projects/{uuid}/environments.
	ListEnvironments(ctx context.Context, projectUUID string) ([]Environment, error)
	// ListServerDestinations is GET /servers/{uuid}/destinations; ErrUnsupported before v4.2.0.
	ListServerDestinations(ctx context.Context, serverUUID string) ([]Destination, error)
	// GetServerDockerCleanup is GET /servers/{uuid}/docker-cleanup: when Coolify's scheduled
	// Docker cleanup runs on the server. ErrNotFound for an unknown server, and from a Coolify
	// without the endpoint.
	GetServerDockerCleanup(ctx context.Context, serverUUID string) (*DockerCleanup, error)

	// CreateDockerImageApplication creates an application that runs a prebuilt image and
	// returns its uuid. Nothing starts (instant_deploy=false). Not retried after a 5xx.
	CreateDockerImageApplication(ctx context.Context, req CreateApplicationRequest) (string, error)
	// GetApplication is GET /applications/{uuid}; ErrNotFound once deleted.
	GetApplication(ctx context.Context, uuid string) (*Application, error)
	// ListApplications lists every application the token sees, filtered by tag when tag is
	// not empty: one call reads the status of every slot of a pool.
	ListApplications(ctx context.Context, tag string) ([]Application, error)
	// SetDescription patches the description (≤255 characters; longer is refused locally,
	// since the server answers 500).
	SetDescription(ctx context.Context, uuid, description string) error
	// UpdateApplication patches the image and limits u sets (empty fields are left as they
	// are; NoLimit removes a limit). They apply at the application's next deployment.
	UpdateApplication(ctx context.Context, uuid string, u AppUpdate) error
	// DeleteApplication queues the deletion; GET keeps answering 200 for a while afterwards.
	// It does not cancel deployments in flight. opts.DockerCleanup prunes the whole server's
	// images, not the application's: a pool deletes with AppLeftovers.
	DeleteApplication(ctx context.Context, uuid string, opts DeleteOptions) error
	// UpsertEnvs sets variables by key in one call. Not transactional: on ErrValidation the
	// variables before the invalid one are saved.
	UpsertEnvs(ctx context.Context, uuid string, envs []EnvVar) ([]EnvVar, error)
	// CreateEnv creates one variable; ErrConflict when the key exists.
	CreateEnv(ctx context.Context, uuid string, env EnvVar) (string, error)
	// DeleteEnv deletes one variable row by its uuid (from ListEnvs): a key's preview twin is
	// a row of its own. ErrNotFound when the application or the row is gone.
	DeleteEnv(ctx context.Context, appUUID, envUUID string) error
	// ListEnvs lists the application's variables, preview twins included.
	ListEnvs(ctx context.Context, uuid string) ([]EnvVar, error)

	// Deploy is POST /deploy?uuid=: starts a deployment. An empty DeploymentUUID means one
	// is already queued or running; a full queue is ErrQueueFull with RetryAfter.
	Deploy(ctx context.Context, appUUID string) (DeployResult, error)
	// Start is POST /applications/{uuid}/start. Beware: on a full queue the answer carries a
	// deployment uuid that does not exist. Prefer Deploy.
	Start(ctx context.Context, uuid string) (DeployResult, error)
	// Restart is a full redeploy for image apps.
	Restart(ctx context.Context, uuid string) (DeployResult, error)
	// Stop removes the container; it does not cancel a deployment in flight (cancel first).
	// It never runs Coolify's server-wide Docker cleanup (docker_cleanup off).
	Stop(ctx context.Context, uuid string) error

	// GetDeployment is GET /deployments/{uuid}.
	GetDeployment(ctx context.Context, uuid string) (*Deployment, error)
	// ListApplicationDeployments returns the total count and a page, newest first; take ≤ 0
	// means the server's default of 10.
	ListApplicationDeployments(ctx context.Context, appUUID string, skip, take int) (int, []Deployment, error)
	// ListActiveDeployments lists queued and in-progress deployments of every application,
	// without their logs.
	ListActiveDeployments(ctx context.Context) ([]Deployment, error)
	// CancelDeployment cancels a queued or running deployment; ErrBadRequest when terminal.
	CancelDeployment(ctx context.Context, uuid string) error
}

var _ API = (*Client)(nil)

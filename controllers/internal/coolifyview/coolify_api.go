package coolifyview

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"botpool.dev/botpool/coolify"
)

// CoolifyAPI is the part of the Coolify API the controllers call, declared where it is used
// rather than taken whole from package coolify: it is all a fake must implement (the unit
// tests' fakes here, the model check's connector in internal/modelcheck), and it says at a
// glance which Coolify calls the operator makes. *coolify.Client implements it, and so reaches
// the Coolify simulator too (coolify/sim serves HTTP; tests point a *coolify.Client at it).
// The methods mean what coolify.API documents; add one here when a controller starts calling it.
//
// A client may also report its base URL (a BaseURL() string method, as *coolify.Client does):
// InstanceOf and coolifyInstance use it to tell Coolify instances apart.
type CoolifyAPI interface {
	// ServerVersion checks the pool's credentials and reachability.
	ServerVersion(ctx context.Context) (string, error)
	// GetServerDockerCleanup says when the server's scheduled Docker cleanup runs: the pool
	// pulls its image there again after each run (controllers/pool/pull.go).
	GetServerDockerCleanup(ctx context.Context, serverUUID string) (*coolify.DockerCleanup, error)

	// Applications: a slot's application is created, found by name, its env and description
	// kept up to date, and deleted with the slot; orphans are found by the pool's tag.
	CreateDockerImageApplication(ctx context.Context, req coolify.CreateApplicationRequest) (string, error)
	GetApplication(ctx context.Context, uuid string) (*coolify.Application, error)
	ListApplications(ctx context.Context, tag string) ([]coolify.Application, error)
	SetDescription(ctx context.Context, uuid, description string) error
	DeleteApplication(ctx context.Context, uuid string, opts coolify.DeleteOptions) error
	UpsertEnvs(ctx context.Context, uuid string, envs []coolify.EnvVar) ([]coolify.EnvVar, error)
	// ListEnvs and DeleteEnv remove the variables a slot's new template no longer has (a key
	// taken out of the slotEnvFrom Secret): an upsert never removes one.
	ListEnvs(ctx context.Context, uuid string) ([]coolify.EnvVar, error)
	DeleteEnv(ctx context.Context, appUUID, envUUID string) error
	// UpdateApplication gives an application a new image, tag or limits (a rollout: the slot
	// template, or a pool's puller image), applied at its next deployment.
	UpdateApplication(ctx context.Context, uuid string, u coolify.AppUpdate) error

	// Deployments: a bound slot deploys its bot, follows the deployment, and stops (cancelling
	// what is still in flight) when the bot is released.
	Deploy(ctx context.Context, appUUID string) (coolify.DeployResult, error)
	Stop(ctx context.Context, uuid string) error
	GetDeployment(ctx context.Context, uuid string) (*coolify.Deployment, error)
	ListApplicationDeployments(ctx context.Context, appUUID string, skip, take int) (int, []coolify.Deployment, error)
	ListActiveDeployments(ctx context.Context) ([]coolify.Deployment, error)
	CancelDeployment(ctx context.Context, uuid string) error
}

// The real client must keep satisfying the narrow interface main.go hands the controllers.
var _ CoolifyAPI = (*coolify.Client)(nil)

// coolifyInstance names the Coolify instance an API talks to (its base URL), or "" for an
// API that does not say (test fakes).
func coolifyInstance(api CoolifyAPI) string {
	if b, ok := api.(interface{ BaseURL() string }); ok {
		return b.BaseURL()
	}
	return ""
}

// InstanceOf identifies the Coolify instance a client talks to: a hash of its base URL, never
// the token (nor any password a URL may carry). "" when the client does not say.
func InstanceOf(api CoolifyAPI) string {
	b, ok := api.(interface{ BaseURL() string })
	if !ok {
		return ""
	}
	sum := sha256.Sum256([]byte(b.BaseURL()))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

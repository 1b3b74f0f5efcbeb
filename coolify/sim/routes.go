package sim

import (
	"net/http"
	"strings"
)

const (
	abilityNone   = ""
	abilityRead   = "read"
	abilityWrite  = "write"
	abilityDeploy = "deploy"
)

// routes lists literal paths before parameterised ones that could also match them.
var routes = []route{
	{http.MethodGet, seg("health"), "healthcheck", abilityNone, handleHealth},
	{http.MethodGet, seg("version"), "version", abilityRead, handleVersion},
	{http.MethodGet, seg("servers"), "list-servers", abilityRead, handleListServers},
	{http.MethodGet, seg("servers/{}"), "get-server-by-uuid", abilityRead, handleGetServer},
	{http.MethodPatch, seg("servers/{}"), "update-server-by-uuid", abilityWrite, handlePatchServer},
	{http.MethodGet, seg("servers/{}/destinations"), "list-server-destinations", abilityRead, handleListDestinations},
	{http.MethodGet, seg("servers/{}/docker-cleanup"), "get-server-docker-cleanup", abilityRead, handleGetDockerCleanup},
	{http.MethodGet, seg("projects"), "list-projects", abilityRead, handleListProjects},
	{http.MethodGet, seg("projects/{}/environments"), "get-environments", abilityRead, handleListEnvironments},
	{http.MethodGet, seg("applications"), "list-applications", abilityRead, handleListApps},
	{http.MethodPost, seg("applications/dockerimage"), "create-dockerimage-application", abilityWrite, handleCreateApp},
	{http.MethodGet, seg("applications/{}"), "get-application-by-uuid", abilityRead, handleGetApp},
	{http.MethodPatch, seg("applications/{}"), "update-application-by-uuid", abilityWrite, handlePatchApp},
	{http.MethodDelete, seg("applications/{}"), "delete-application-by-uuid", abilityWrite, handleDeleteApp},
	{http.MethodGet, seg("applications/{}/envs"), "list-envs-by-application-uuid", abilityRead, handleListEnvs},
	{http.MethodPost, seg("applications/{}/envs"), "create-env-by-application-uuid", abilityWrite, handleCreateEnv},
	{http.MethodPatch, seg("applications/{}/envs/bulk"), "update-envs-by-application-uuid", abilityWrite, handleBulkEnvs},
	{http.MethodDelete, seg("applications/{}/envs/{}"), "delete-env-by-application-uuid", abilityWrite, handleDeleteEnv},
	{http.MethodPost, seg("applications/{}/start"), "start-application-by-uuid", abilityDeploy, handleStart},
	{http.MethodPost, seg("applications/{}/restart"), "restart-application-by-uuid", abilityDeploy, handleRestart},
	{http.MethodPost, seg("applications/{}/stop"), "stop-application-by-uuid", abilityDeploy, handleStop},
	{http.MethodPost, seg("deploy"), "deploy-by-tag-or-uuid", abilityDeploy, handleDeploy},
	{http.MethodGet, seg("deployments"), "list-deployments", abilityRead, handleListDeployments},
	{http.MethodGet, seg("deployments/applications/{}"), "list-deployments-by-app-uuid", abilityRead, handleAppDeployments},
	{http.MethodGet, seg("deployments/{}"), "get-deployment-by-uuid", abilityRead, handleGetDeployment},
	{http.MethodPost, seg("deployments/{}/cancel"), "cancel-deployment-by-uuid", abilityDeploy, handleCancel},
}

func seg(p string) []string { return strings.Split(p, "/") }

// match finds the route of r: 404 for an unknown path, 405 for a GET on a POST action.
func match(r *http.Request) (*route, []string, int) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/")
	if !ok {
		return nil, nil, http.StatusNotFound
	}
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	pathMatched := false
	for i := range routes {
		rt := &routes[i]
		params, ok := matchSegments(rt.pattern, parts)
		if !ok {
			continue
		}
		if rt.method == r.Method {
			return rt, params, 0
		}
		if rt.method == http.MethodPost && r.Method == http.MethodGet {
			pathMatched = true
		}
	}
	if pathMatched {
		return nil, nil, http.StatusMethodNotAllowed
	}
	return nil, nil, http.StatusNotFound
}

func matchSegments(pattern, parts []string) ([]string, bool) {
	if len(pattern) != len(parts) {
		return nil, false
	}
	var params []string
	for i, p := range pattern {
		switch {
		case p == "{}" && parts[i] != "":
			params = append(params, parts[i])
		case p != parts[i]:
			return nil, false
		}
	}
	return params, true
}

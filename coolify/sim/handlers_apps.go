package sim

import (
	"net/http"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"botpool.dev/botpool/coolify"
)

var (
	msgAppNotFound       = msg{"message": "Application not found."}
	msgAppNotFoundNoStop = msg{"message": "Application not found"} // DELETE, PATCH, envs, deployments
)

func handleHealth(*Sim, *reqCtx) (int, any) { return http.StatusOK, rawText("OK") }

func handleVersion(s *Sim, _ *reqCtx) (int, any) { return http.StatusOK, rawText(s.cfg.Version) }

func (s *Sim) versionAtLeast(v string) bool { return coolify.CompareVersions(s.cfg.Version, v) >= 0 }

func handleCreateApp(s *Sim, rc *reqCtx) (int, any) {
	f, code, body := decodeObject(rc)
	if code != 0 {
		return code, body
	}
	allowed := createFields
	if !s.versionAtLeast("4.0.0-beta.454") || !s.versionAtLeast("4.2.0") {
		allowed = set(sortedKeys(createFields)...)
		allowed["autogenerate_domain"] = s.versionAtLeast("4.0.0-beta.454")
		allowed["tags"] = s.versionAtLeast("4.2.0")
	}
	if code, body := refuseUnknown(f, allowed); code != 0 {
		return code, body
	}
	for _, k := range []string{"project_uuid", "server_uuid", "docker_registry_image_name"} {
		if v, _ := f.str(k); v == "" {
			return validationFailed(k, "The "+human(k)+" field is required.")
		}
	}
	if code, body := f.checkStrings("project_uuid", "server_uuid", "environment_name", "environment_uuid",
		"docker_registry_image_name", "docker_registry_image_tag", "ports_exposes", "destination_uuid",
		"name", "description", "limits_cpus", "limits_memory"); code != 0 {
		return code, body
	}
	envName, _ := f.str("environment_name")
	envUUID, _ := f.str("environment_uuid")
	if envName == "" && envUUID == "" {
		return http.StatusUnprocessableEntity, msg{"message": "You need to provide at least one of environment_name or environment_uuid."}
	}
	desc, _ := f.str("description")
	if utf8.RuneCountInString(desc) > maxDescription {
		return http.StatusInternalServerError, msgServerError
	}
	projUUID, _ := f.str("project_uuid")
	p := s.projects[projUUID]
	if p == nil {
		return http.StatusNotFound, msg{"message": "Project not found."}
	}
	envIdx := slices.IndexFunc(p.Environments, func(e EnvironmentSpec) bool {
		return (envUUID != "" && e.UUID == envUUID) || (envUUID == "" && e.Name == envName)
	})
	if envIdx < 0 {
		return http.StatusNotFound, msg{"message": "Environment not found."}
	}
	srvUUID, _ := f.str("server_uuid")
	srv := s.servers[srvUUID]
	if srv == nil {
		return http.StatusNotFound, msg{"message": "Server not found."}
	}
	destUUID, _ := f.str("destination_uuid")
	switch {
	case destUUID == "" && len(srv.Destinations) > 1:
		return http.StatusBadRequest, msg{"message": "Server has multiple destinations and you do not set destination_uuid."}
	case destUUID == "":
		destUUID = srv.Destinations[0].UUID
	case !slices.ContainsFunc(srv.Destinations, func(d DestinationSpec) bool { return d.UUID == destUUID }):
		return http.StatusNotFound, msg{"message": "Destination not found."}
	}
	a := &app{id: s.id(), uuid: s.uuid(), server: srv, projectUUID: p.UUID, envUUID: p.Environments[envIdx].UUID,
		envID: p.envIDs[envIdx], destUUID: destUUID, description: desc, created: rc.now, updated: rc.now}
	a.image, _ = f.str("docker_registry_image_name")
	a.tag, _ = f.str("docker_registry_image_tag")
	if a.tag == "" {
		a.tag = "latest"
	}
	a.ports, _ = f.str("ports_exposes")
	a.cpus, _ = f.str("limits_cpus")
	a.mem, _ = f.str("limits_memory")
	if a.name, _ = f.str("name"); a.name == "" {
		a.name = "docker-image-" + a.uuid
	}
	if raw, ok := f["tags"]; ok {
		var tags []string
		if err := jsonUnmarshal(raw, &tags); err != nil {
			return validationFailed("tags", []string{"The tags field must be an array."})
		}
		a.tags = tags
	}
	s.apps[a.uuid] = a
	if f.boolean("instant_deploy") {
		s.queueDeployment(a, false, rc.now)
	}
	return http.StatusCreated, msg{"uuid": a.uuid, "domains": nil}
}

func handleGetApp(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFound
	}
	return http.StatusOK, s.appJSON(a, rc.now)
}

func handleListApps(s *Sim, rc *reqCtx) (int, any) {
	tag := rc.r.URL.Query().Get("tag")
	list := make([]*app, 0, len(s.apps))
	for _, a := range s.apps {
		if tag == "" || slices.Contains(a.tags, tag) {
			list = append(list, a)
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].name == list[j].name {
			return list[i].id < list[j].id
		}
		return list[i].name < list[j].name
	})
	out := make([]msg, 0, len(list))
	for _, a := range list {
		out = append(out, s.appJSON(a, rc.now))
	}
	return http.StatusOK, out
}

func handlePatchApp(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFoundNoStop
	}
	f, code, body := decodeObject(rc)
	if code != 0 {
		return code, body
	}
	if len(f) == 0 {
		return http.StatusBadRequest, msg{"message": "Invalid request."}
	}
	if code, body := refuseUnknown(f, patchFields); code != 0 {
		return code, body
	}
	if code, body := f.checkStrings("name", "description", "docker_registry_image_name",
		"docker_registry_image_tag", "ports_exposes", "limits_cpus", "limits_memory"); code != 0 {
		return code, body
	}
	if d, ok := f.str("description"); ok {
		if utf8.RuneCountInString(d) > maxDescription {
			return http.StatusInternalServerError, msgServerError
		}
		a.description = d
	}
	// Image changes are stored and apply at the next deployment, as on the server.
	if v, ok := f.str("name"); ok && v != "" {
		a.name = v
	}
	if v, ok := f.str("docker_registry_image_name"); ok && v != "" {
		a.image = v
	}
	if v, ok := f.str("docker_registry_image_tag"); ok && v != "" {
		a.tag = v
	}
	// Limits too: the server stores what it is given ("0" is no limit) and the next
	// deployment runs the container with them.
	if v, ok := f.str("limits_cpus"); ok {
		a.cpus = v
	}
	if v, ok := f.str("limits_memory"); ok {
		a.mem = v
	}
	a.updated = rc.now
	return http.StatusOK, msg{"uuid": a.uuid}
}

func handleDeleteApp(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFoundNoStop
	}
	if !a.deleting {
		a.deleting = true
		cleanup := queryFlag(rc.r.URL.Query(), "docker_cleanup", true)
		// Deletion is a background job: GET answers 200 until it has run. Deployments in
		// flight are not cancelled. Its stop gives up on a server that is not functional, and
		// the application is deleted all the same: its container is left running, unknown.
		// Unless docker_cleanup is false, the server's Docker cleanup runs between the stop
		// and the delete.
		s.after(rc.now, s.cfg.DeleteDelay, func(at time.Time) {
			if a.server.functional() {
				s.stopContainer(a, at, "deleted")
				if cleanup {
					s.dockerCleanup(a.server, at, "delete")
				}
			} else if a.running {
				a.server.orphans = append(a.server.orphans, a)
			}
			delete(s.apps, a.uuid)
		})
	}
	return http.StatusOK, msg{"message": "Application deletion request queued."}
}

func handleListServers(s *Sim, _ *reqCtx) (int, any) {
	out := make([]msg, 0, len(s.servers))
	for _, k := range sortedKeys(s.servers) {
		out = append(out, serverJSON(s.servers[k], true))
	}
	return http.StatusOK, out
}

func handleGetServer(s *Sim, rc *reqCtx) (int, any) {
	srv := s.servers[rc.uuid()]
	if srv == nil {
		return http.StatusNotFound, msg{"message": "Server not found."}
	}
	return http.StatusOK, serverJSON(srv, false)
}

func handlePatchServer(s *Sim, rc *reqCtx) (int, any) {
	srv := s.servers[rc.uuid()]
	if srv == nil {
		return http.StatusNotFound, msg{"message": "Server not found."}
	}
	f, code, body := decodeObject(rc)
	if code != 0 {
		return code, body
	}
	if code, body := refuseUnknown(f, serverPatchFields); code != 0 {
		return code, body
	}
	for k, dst := range map[string]*int{"concurrent_builds": &srv.ConcurrentBuilds, "deployment_queue_limit": &srv.DeploymentQueueLimit} {
		if raw, ok := f[k]; ok {
			var n int
			if jsonUnmarshal(raw, &n) != nil || n < 1 {
				return validationFailed(k, []string{"The " + human(k) + " field must be at least 1."})
			}
			*dst = n
		}
	}
	return http.StatusCreated, msg{"uuid": srv.UUID}
}

func handleListDestinations(s *Sim, rc *reqCtx) (int, any) {
	if !s.versionAtLeast("4.2.0") {
		return http.StatusNotFound, msgNotFound
	}
	srv := s.servers[rc.uuid()]
	if srv == nil {
		return http.StatusNotFound, msg{"message": "Server not found."}
	}
	out := make([]msg, 0, len(srv.Destinations))
	for _, d := range srv.Destinations {
		out = append(out, msg{"uuid": d.UUID, "name": d.Name, "network": d.Network, "type": "standalone",
			"server_uuid": srv.UUID, "created_at": stamp(srv.created), "updated_at": stamp(srv.created)})
	}
	return http.StatusOK, out
}

func handleListProjects(s *Sim, _ *reqCtx) (int, any) {
	out := make([]msg, 0, len(s.projects))
	for _, k := range sortedKeys(s.projects) {
		p := s.projects[k]
		out = append(out, msg{"id": p.id, "uuid": p.UUID, "name": p.Name, "description": ""})
	}
	return http.StatusOK, out
}

func handleListEnvironments(s *Sim, rc *reqCtx) (int, any) {
	p := s.projects[rc.uuid()]
	if p == nil {
		return http.StatusNotFound, msg{"message": "Project not found."}
	}
	out := make([]msg, 0, len(p.Environments))
	for i, e := range p.Environments {
		out = append(out, msg{"id": p.envIDs[i], "uuid": e.UUID, "name": e.Name, "project_id": p.id, "description": ""})
	}
	return http.StatusOK, out
}

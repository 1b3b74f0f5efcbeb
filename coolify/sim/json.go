package sim

import (
	"encoding/json"
	"strconv"
	"time"
)

func jsonUnmarshal(raw json.RawMessage, v any) error { return json.Unmarshal(raw, v) }

// stamp formats times like Laravel's JSON dates.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func (s *Sim) appJSON(a *app, now time.Time) msg {
	return msg{
		"uuid": a.uuid, "name": a.name, "description": a.description, "fqdn": nil,
		"status": s.visibleStatus(a, now), "build_pack": "dockerimage",
		"docker_registry_image_name": a.image, "docker_registry_image_tag": a.tag,
		"ports_exposes": a.ports, "limits_cpus": orDefault(a.cpus, "0"), "limits_memory": orDefault(a.mem, "0"),
		"health_check_enabled": false, "environment_id": a.envID, "destination_id": 1,
		"destination_type": "App\\Models\\StandaloneDocker", "max_restart_count": 10,
		"created_at": stamp(a.created), "updated_at": stamp(a.updated), "deleted_at": nil,
		"server_status": true, "restart_count": a.restarts, "last_online_at": stamp(now),
		"settings": msg{"is_static": false, "is_build_server_enabled": false, "is_consistent_container_name_enabled": false,
			"connect_to_docker_network": false, "is_container_label_escape_enabled": true},
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// deploymentJSON is a deployment; Coolify hides its logs from a token without read:sensitive.
func deploymentJSON(d *deployment, withLogs bool) msg {
	m := msg{
		"id": d.id, "deployment_uuid": d.uuid, "application_id": strconv.Itoa(d.app.id),
		"application_name": d.app.name, "server_id": d.server.id, "server_name": d.server.Name,
		"destination_id": "1", "status": d.status, "pull_request_id": 0, "force_rebuild": false,
		"commit": "HEAD", "is_webhook": false, "is_api": true, "restart_only": false,
		"rollback": false, "only_this_server": false,
		"created_at": stamp(d.created), "updated_at": stamp(d.updated), "finished_at": nil,
		"deployment_url": "/project/deployment/" + d.uuid,
	}
	if !d.finished.IsZero() {
		m["finished_at"] = stamp(d.finished)
	}
	if withLogs {
		m["logs"] = deploymentLogs(d)
	}
	return m
}

// deploymentLogs is the logs field: the entries as a JSON string, as Coolify stores them.
func deploymentLogs(d *deployment) string {
	entries := make([]msg, 0, len(d.logs))
	for i, l := range d.logs {
		typ := "stdout"
		if l.stderr {
			typ = "stderr"
		}
		entries = append(entries, msg{"command": nil, "output": l.output, "type": typ,
			"timestamp": stamp(l.at), "hidden": false, "batch": 1, "order": i + 1})
	}
	b, _ := json.Marshal(entries)
	return string(b)
}

func envJSON(a *app, e *envVar, sensitive bool) msg {
	m := msg{
		"id": e.id, "uuid": e.uuid, "key": e.key, "is_preview": e.preview, "is_literal": e.literal,
		"is_multiline": e.multiline, "is_runtime": true, "is_buildtime": true, "is_shared": false,
		"is_shown_once": false, "resourceable_type": "App\\Models\\Application", "resourceable_id": a.id,
		"version": "4.3.11", "created_at": stamp(e.created), "updated_at": stamp(e.updated), "comment": nil,
	}
	if sensitive {
		m["value"], m["real_value"] = e.value, e.value
	}
	return m
}

// serverJSON is a server. Coolify's list also copies is_reachable and is_usable from the
// settings to the top level; an unreachable server reads unusable too (its connection check
// sets both).
func serverJSON(srv *server, list bool) msg {
	reachable, usable := !srv.unreachable, srv.functional()
	m := msg{
		"id": srv.id, "uuid": srv.UUID, "name": srv.Name, "description": "", "ip": srv.IP,
		"user": "root", "port": 22, "proxy": msg{"type": "traefik"}, "proxy_type": "traefik",
		"settings": msg{"id": srv.id, "server_id": srv.id, "concurrent_builds": srv.ConcurrentBuilds,
			"deployment_queue_limit": srv.DeploymentQueueLimit, "is_reachable": reachable, "is_usable": usable,
			"is_build_server": false, "dynamic_timeout": 3600},
	}
	if list {
		m["is_reachable"], m["is_usable"] = reachable, usable
	}
	return m
}

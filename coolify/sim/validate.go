package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

const maxDescription = 255

// fields is a decoded request body.
type fields map[string]json.RawMessage

// decodeObject reads a JSON object body; a missing body is an empty object.
func decodeObject(rc *reqCtx) (fields, int, any) {
	f := fields{}
	if len(bytes.TrimSpace(rc.body)) == 0 {
		return f, 0, nil
	}
	if err := json.Unmarshal(rc.body, &f); err != nil {
		return nil, http.StatusBadRequest, msg{"message": "Invalid request.", "error": "Invalid JSON."}
	}
	return f, 0, nil
}

// refuseUnknown answers 422 for the first field outside allowed, as the server does.
func refuseUnknown(f fields, allowed map[string]bool) (int, any) {
	for _, k := range sortedKeys(f) {
		if !allowed[k] {
			return validationFailed(k, []string{"This field is not allowed."})
		}
	}
	return 0, nil
}

// validationFailed answers 422; v is a []string or, as the server sometimes sends, a string.
func validationFailed(field string, v any) (int, any) {
	return http.StatusUnprocessableEntity, msg{"message": "Validation failed.", "errors": msg{field: v}}
}

func (f fields) str(k string) (string, bool) {
	raw, ok := f[k]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// checkStrings validates string fields: type and the 255-character limit of name-like fields.
func (f fields) checkStrings(keys ...string) (int, any) {
	for _, k := range keys {
		raw, ok := f[k]
		if !ok || string(raw) == "null" {
			continue
		}
		s, ok := f.str(k)
		if !ok {
			return validationFailed(k, "The "+human(k)+" field must be a string.")
		}
		if k != "description" && utf8.RuneCountInString(s) > 255 {
			return validationFailed(k, []string{"The " + human(k) + " field must not be greater than 255 characters."})
		}
	}
	return 0, nil
}

func (f fields) boolean(k string) bool {
	var b bool
	_ = json.Unmarshal(f[k], &b)
	return b
}

func human(k string) string {
	b := []byte(k)
	for i, c := range b {
		if c == '_' {
			b[i] = ' '
		}
	}
	return string(b)
}

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// createFields are the fields POST /applications/dockerimage accepts (the spec's list).
var createFields = set("project_uuid", "server_uuid", "environment_name", "environment_uuid",
	"docker_registry_image_name", "docker_registry_image_tag", "ports_exposes", "destination_uuid",
	"name", "description", "domains", "ports_mappings", "health_check_enabled", "health_check_path",
	"health_check_port", "health_check_host", "health_check_method", "health_check_return_code",
	"health_check_scheme", "health_check_response_text", "health_check_interval",
	"health_check_timeout", "health_check_retries", "health_check_start_period", "limits_memory",
	"limits_memory_swap", "limits_memory_swappiness", "limits_memory_reservation", "limits_cpus",
	"limits_cpuset", "limits_cpu_shares", "custom_labels", "custom_docker_run_options",
	"post_deployment_command", "post_deployment_command_container", "pre_deployment_command",
	"pre_deployment_command_container", "redirect", "instant_deploy", "is_force_https_enabled",
	"use_build_server", "connect_to_docker_network", "force_domain_override", "max_restart_count",
	"autogenerate_domain", "tags", "is_container_label_escape_enabled", "stop_grace_period")

// patchFields are those PATCH /applications/{uuid} accepts; the spec lists more, but the
// server refuses project_uuid, server_uuid, environment_name, destination_uuid and
// autogenerate_domain.
var patchFields = set("name", "description", "domains", "docker_registry_image_name",
	"docker_registry_image_tag", "ports_exposes", "ports_mappings", "health_check_enabled",
	"health_check_path", "health_check_port", "limits_memory", "limits_memory_swap",
	"limits_memory_reservation", "limits_cpus", "limits_cpuset", "limits_cpu_shares",
	"custom_labels", "custom_docker_run_options", "instant_deploy", "max_restart_count",
	"stop_grace_period", "is_force_https_enabled", "redirect")

var envFields = set("key", "value", "is_preview", "is_literal", "is_multiline", "is_shown_once", "comment")

var serverPatchFields = set("name", "description", "ip", "port", "user", "concurrent_builds",
	"deployment_queue_limit", "dynamic_timeout", "wildcard_domain")

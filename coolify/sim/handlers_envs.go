package sim

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
)

func handleListEnvs(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFoundNoStop
	}
	out := make([]msg, 0, len(a.envs))
	for _, e := range a.envs {
		out = append(out, envJSON(a, e, rc.can("read:sensitive")))
	}
	return http.StatusOK, out
}

// envInput is one variable as the create and bulk endpoints take it.
type envInput struct {
	key, value                  string
	preview, literal, multiline bool
}

func parseEnv(f fields) (envInput, int, any) {
	if code, body := refuseUnknown(f, envFields); code != 0 {
		return envInput{}, code, body
	}
	key, _ := f.str("key")
	if key == "" {
		c, b := validationFailed("key", []string{"The key field is required."})
		return envInput{}, c, b
	}
	if _, ok := f["value"]; !ok {
		c, b := validationFailed("value", []string{"The value field is required."})
		return envInput{}, c, b
	}
	value, ok := f.str("value")
	if !ok {
		c, b := validationFailed("value", "The value field must be a string.")
		return envInput{}, c, b
	}
	return envInput{key: key, value: value, preview: f.boolean("is_preview"),
		literal: f.boolean("is_literal"), multiline: f.boolean("is_multiline")}, 0, nil
}

func (a *app) findEnv(key string, preview bool) *envVar {
	for _, e := range a.envs {
		if e.key == key && e.preview == preview {
			return e
		}
	}
	return nil
}

// addEnv creates a variable and its preview twin, as the server does for every new key.
func (s *Sim) addEnv(a *app, in envInput, now time.Time) *envVar {
	var first *envVar
	for _, preview := range []bool{false, true} {
		e := &envVar{id: s.id(), uuid: s.uuid(), key: in.key, value: in.value, preview: preview,
			literal: in.literal, multiline: in.multiline, created: now, updated: now}
		a.envs = append(a.envs, e)
		if preview == in.preview {
			first = e
		}
	}
	return first
}

func handleCreateEnv(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFoundNoStop
	}
	f, code, body := decodeObject(rc)
	if code != 0 {
		return code, body
	}
	in, code, body := parseEnv(f)
	if code != 0 {
		return code, body
	}
	if a.findEnv(in.key, in.preview) != nil {
		return http.StatusConflict, msg{"message": "Environment variable already exists. Use PATCH request to update it."}
	}
	e := s.addEnv(a, in, rc.now)
	return http.StatusCreated, msg{"uuid": e.uuid}
}

// handleBulkEnvs upserts item by item and stops at the first invalid one, keeping the
// items before it: the endpoint is not transactional.
func handleBulkEnvs(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFoundNoStop
	}
	f, code, body := decodeObject(rc)
	if code != 0 {
		return code, body
	}
	if code, body := refuseUnknown(f, set("data")); code != 0 {
		return code, body
	}
	var items []fields
	if raw, ok := f["data"]; !ok || json.Unmarshal(raw, &items) != nil {
		return validationFailed("data", []string{"The data field is required and must be an array."})
	}
	out := make([]msg, 0, len(items))
	for i, item := range items {
		in, code, body := parseEnv(item)
		if code != 0 {
			if m, ok := body.(msg); ok {
				m["message"] = "Validation failed for item " + strconv.Itoa(i) + "."
			}
			return code, body
		}
		e := a.findEnv(in.key, in.preview)
		if e == nil {
			e = s.addEnv(a, in, rc.now)
		} else {
			e.value, e.literal, e.multiline, e.updated = in.value, in.literal, in.multiline, rc.now
		}
		out = append(out, envJSON(a, e, rc.can("read:sensitive")))
	}
	a.updated = rc.now
	return http.StatusCreated, out
}

// handleDeleteEnv deletes one variable row by its uuid: a key's preview twin is another row,
// left in place. The 404 for the application ends with a period here, unlike the other env
// endpoints.
func handleDeleteEnv(s *Sim, rc *reqCtx) (int, any) {
	a := s.apps[rc.uuid()]
	if a == nil {
		return http.StatusNotFound, msgAppNotFound
	}
	i := slices.IndexFunc(a.envs, func(e *envVar) bool { return e.uuid == rc.params[1] })
	if i < 0 {
		return http.StatusNotFound, msg{"message": "Environment variable not found."}
	}
	a.envs = slices.Delete(a.envs, i, i+1)
	a.updated = rc.now
	return http.StatusOK, msg{"message": "Environment variable deleted."}
}

{{/* The chart name, overridable. */}}
{{- define "botpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name: the release name, or <release>-<chart> when the release
name does not already contain the chart name. Kept to 52 characters so suffixes such as
"-bot-api" and "-leader-election" stay within the 63 of a DNS label.
*/}}
{{- define "botpool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "botpool.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "botpool.labels" -}}
helm.sh/chart: {{ include "botpool.chart" . }}
{{ include "botpool.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: botpool
{{- end }}

{{/* Labels that select the manager pods; immutable in a Deployment, so never change them. */}}
{{- define "botpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "botpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "botpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "botpool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The manager image: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "botpool.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The in-cluster URL of the bot API: what bot containers use as BOTPOOL_API_URL. */}}
{{- define "botpool.botApiURL" -}}
{{- printf "%s://%s-bot-api.%s.svc:%v" (ternary "https" "http" (not (empty .Values.botApi.tls.secretName))) (include "botpool.fullname" .) .Release.Namespace .Values.botApi.service.port }}
{{- end }}

{{/*
"true" when the manager gets a Postgres URL (database.existingSecret, or BOTPOOL_DATABASE_URL /
--database-url passed through extraEnv / extraArgs), so that every replica shares one store.
*/}}
{{- define "botpool.sharedStore" -}}
{{- $shared := .Values.database.existingSecret }}
{{- range .Values.extraEnv }}
{{- if eq .name "BOTPOOL_DATABASE_URL" }}{{ $shared = "true" }}{{ end }}
{{- end }}
{{- range .Values.extraArgs }}
{{- if hasPrefix "--database-url" . }}{{ $shared = "true" }}{{ end }}
{{- end }}
{{- if $shared }}true{{ end }}
{{- end }}

{{/*
The replica count: replicaCount, or when it is null 2 with a shared store and 1 without. Fails
on the combinations that would break the operator.
*/}}
{{- define "botpool.replicas" -}}
{{- $replicas := 1 }}
{{- if kindIs "invalid" .Values.replicaCount }}
{{- if include "botpool.sharedStore" . }}{{ $replicas = 2 }}{{ end }}
{{- else }}
{{- $replicas = int .Values.replicaCount }}
{{- end }}
{{- if gt $replicas 1 }}
{{- if not .Values.leaderElection.enabled }}
{{- fail "replicaCount > 1 needs leaderElection.enabled: without it every replica would reconcile the same objects" }}
{{- end }}
{{- if not (include "botpool.sharedStore" .) }}
{{- fail "replicaCount > 1 needs a shared store: set database.existingSecret (Postgres). With the in-memory store each replica keeps the heartbeats it receives, and the leader would miss those sent to the others" }}
{{- end }}
{{- end }}
{{- $replicas }}
{{- end }}

{{/* The manager's ServiceAccount as the API server names it in requests. */}}
{{- define "botpool.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "botpool.serviceAccountName" .) }}
{{- end }}

{{/*
botApi.separate: the bot API runs as its own Deployment (--components=bot-api) with its own
ServiceAccount, and the manager Deployment runs only the controllers.
*/}}

{{/*
Labels that select the bot API pods when it runs apart. Not the manager's selector labels plus
a component: the manager Deployment's selector (name and instance) is immutable and would match
them, so the name differs instead. Immutable too, so never change them.
*/}}
{{- define "botpool.botApiSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-bot-api" (include "botpool.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The pods the bot API Service (and its NetworkPolicy rule) reach: the bot API's own, or the manager's. */}}
{{- define "botpool.botApiPodSelector" -}}
{{- if .Values.botApi.separate }}
{{- include "botpool.botApiSelectorLabels" . }}
{{- else }}
{{- include "botpool.selectorLabels" . }}
{{- end }}
{{- end }}

{{/*
The bot API's ServiceAccount: botApi.serviceAccount.name, else <fullname>-bot-api when the
chart creates ServiceAccounts. Never the manager's, which holds Secrets: that is what running
apart is for.
*/}}
{{- define "botpool.botApiServiceAccountName" -}}
{{- $name := .Values.botApi.serviceAccount.name }}
{{- if not $name }}
{{- if not .Values.serviceAccount.create }}
{{- fail "botApi.separate with serviceAccount.create=false needs botApi.serviceAccount.name: an existing ServiceAccount for the bot API, other than the manager's" }}
{{- end }}
{{- $name = printf "%s-bot-api" (include "botpool.fullname" .) }}
{{- end }}
{{- if eq $name (include "botpool.serviceAccountName" .) }}
{{- fail (printf "botApi.serviceAccount.name %q is the manager's ServiceAccount: the bot API runs apart to hold none of the manager's rights (Secrets); name another" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{/* Fails on a botApi.separate that would break the operator; call it from an always-rendered template. */}}
{{- define "botpool.checkSeparate" -}}
{{- if .Values.botApi.separate }}
{{- if not (include "botpool.sharedStore" .) }}
{{- fail "botApi.separate needs a shared store: set database.existingSecret (Postgres). The bot API records heartbeats in the store and the controllers read them there; the in-memory store lives in one process" }}
{{- end }}
{{- $_ := include "botpool.botApiServiceAccountName" . }}
{{- end }}
{{- end }}

{{/*
What the manager and the bot API pods share: scheduling and pod metadata from the values. The
argument is a dict: root (the chart's context) and selector (the pods' selector labels, the
default labelSelector of topologySpreadConstraints).
*/}}
{{- define "botpool.podScheduling" -}}
{{- $root := .root }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not $constraint.labelSelector }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" ($.selector | fromYaml)) }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- end }}

{{/* The container's environment: the database URL from its Secret, and extraEnv. */}}
{{- define "botpool.env" -}}
{{- if or .Values.database.existingSecret .Values.extraEnv }}
env:
  {{- with .Values.database.existingSecret }}
  # Read by the manager as the default of --database-url.
  - name: BOTPOOL_DATABASE_URL
    valueFrom:
      secretKeyRef:
        name: {{ . }}
        key: {{ $.Values.database.secretKey }}
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The bot API's event quotas (--event-quota-*). */}}
{{- define "botpool.eventQuotaArgs" -}}
- --event-quota-bot-events={{ .Values.eventQuota.botEventsPerSecond }}
- --event-quota-bot-bytes={{ int64 .Values.eventQuota.botBytesPerSecond }}
- --event-quota-namespace-events={{ .Values.eventQuota.namespaceEventsPerSecond }}
- --event-quota-namespace-bytes={{ int64 .Values.eventQuota.namespaceBytesPerSecond }}
- --event-quota-window={{ .Values.eventQuota.window }}
{{- end }}

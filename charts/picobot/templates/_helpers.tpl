{{/*
Names. Kubernetes names are at most 63 characters, so every name is cut
there (and a trailing "-" removed).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "picobot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object name: fullnameOverride, or the release name
plus the chart name unless the release name already contains it. */}}
{{- define "picobot.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of a component's objects: (dict "ctx" $ "component" "operator"). */}}
{{- define "picobot.componentName" -}}
{{- printf "%s-%s" (include "picobot.fullname" .ctx) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the generated credentials of the bundled servers. */}}
{{- define "picobot.bundledSecretName" -}}
{{- include "picobot.componentName" (dict "ctx" . "component" "bundled-credentials") }}
{{- end }}

{{/*
Labels: (dict "ctx" $ "component" "operator").
*/}}
{{- define "picobot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "picobot.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "picobot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "picobot.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: picobot
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
An image reference: (dict "ctx" $ "image" .Values.image). A digest wins over
the tag; the tag defaults to the chart's appVersion.
*/}}
{{- define "picobot.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end }}

{{/* A component's ServiceAccount name: (dict "ctx" $ "component" "gateway"). */}}
{{- define "picobot.serviceAccountName" -}}
{{- $sa := (index .ctx.Values .component).serviceAccount }}
{{- if $sa.create }}
{{- default (include "picobot.componentName" .) $sa.name }}
{{- else }}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) $sa.name }}
{{- end }}
{{- end }}

{{- define "picobot.operator.serviceAccountName" -}}
{{- include "picobot.serviceAccountName" (dict "ctx" . "component" "operator") }}
{{- end }}

{{- define "picobot.gateway.serviceAccountName" -}}
{{- include "picobot.serviceAccountName" (dict "ctx" . "component" "gateway") }}
{{- end }}

{{/* Pod and container security settings of PicoBot's own pods: non-root (the
images run as 65532), no privilege escalation, read-only root, no
capabilities, the runtime's default seccomp profile. */}}
{{- define "picobot.podSecurityContext" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "picobot.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Scheduling fields shared by the Deployments: (the component's values). */}}
{{- define "picobot.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Where each connection setting comes from. Secrets are referenced with
secretKeyRef (never optional): a missing Secret or key stops the pod in
CreateContainerConfigError naming it, instead of a crash loop.
*/}}

{{/* In-cluster DNS name of a bundled server: (dict "ctx" $ "component" "postgres"). */}}
{{- define "picobot.bundledHost" -}}
{{- printf "%s.%s.svc" (include "picobot.componentName" .) .ctx.Release.Namespace }}
{{- end }}

{{- define "picobot.env.postgresURL" -}}
- name: PICOBOT_POSTGRES_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.postgres.bundled.enabled }}
      name: {{ include "picobot.bundledSecretName" . }}
      key: postgres-app-url
      {{- else }}
      name: {{ .Values.postgres.external.existingSecret }}
      key: {{ .Values.postgres.external.urlKey }}
      {{- end }}
{{- end }}

{{- define "picobot.tenantCredentialsSecretName" -}}
{{- include "picobot.componentName" (dict "ctx" . "component" "tenant-credentials") }}
{{- end }}

{{/* What the operator provisions each tenant's own credentials with. */}}
{{- define "picobot.env.tenantCredentials" -}}
{{ include "picobot.env.postgresOwnerURL" . }}
- name: PICOBOT_TENANT_CREDENTIALS_KEY
  valueFrom:
    secretKeyRef:
      {{- with .Values.operator.tenantCredentials.existingSecret }}
      name: {{ . }}
      key: {{ $.Values.operator.tenantCredentials.keyKey }}
      {{- else }}
      name: {{ include "picobot.tenantCredentialsSecretName" . }}
      key: key
      {{- end }}
{{- end }}

{{- define "picobot.env.postgresOwnerURL" -}}
- name: PICOBOT_POSTGRES_OWNER_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.postgres.bundled.enabled }}
      name: {{ include "picobot.bundledSecretName" . }}
      key: postgres-owner-url
      {{- else }}
      name: {{ .Values.postgres.external.existingSecret }}
      key: {{ .Values.postgres.external.ownerUrlKey }}
      {{- end }}
{{- end }}

{{/* Every connection setting of the operator and gateway (the operator passes
them on to session pods). */}}
{{- define "picobot.env.connections" -}}
{{ include "picobot.env.postgresURL" . }}
{{ include "picobot.env.redisURL" . }}
{{ include "picobot.env.s3" . | trim }}
{{- end }}

{{- define "picobot.env.redisURL" -}}
- name: PICOBOT_REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- if .Values.redis.bundled.enabled }}
      name: {{ include "picobot.bundledSecretName" . }}
      key: redis-url
      {{- else }}
      name: {{ .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.urlKey }}
      {{- end }}
{{- end }}

{{/* Where the bucket is, and the keys to it unless the SDK's default chain
(IRSA, Pod Identity) provides them. */}}
{{- define "picobot.env.s3" -}}
{{- if .Values.s3.bundled.enabled }}
- name: PICOBOT_S3_ENDPOINT
  value: {{ printf "http://%s:8333" (include "picobot.bundledHost" (dict "ctx" . "component" "s3")) | quote }}
{{- else if .Values.s3.external.endpoint }}
- name: PICOBOT_S3_ENDPOINT
  value: {{ .Values.s3.external.endpoint | quote }}
{{- end }}
- name: PICOBOT_S3_BUCKET
  value: {{ .Values.s3.bucket | quote }}
- name: PICOBOT_S3_REGION
  value: {{ .Values.s3.region | quote }}
- name: PICOBOT_S3_PATH_STYLE
  value: {{ or .Values.s3.bundled.enabled .Values.s3.external.pathStyle | toString | quote }}
{{- if .Values.s3.bundled.enabled }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "picobot.bundledSecretName" . }}
      key: s3-access-key-id
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "picobot.bundledSecretName" . }}
      key: s3-secret-access-key
{{- else if .Values.s3.external.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.external.existingSecret }}
      key: {{ .Values.s3.external.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.s3.external.existingSecret }}
      key: {{ .Values.s3.external.secretAccessKeyKey }}
{{- end }}
{{- end }}

{{/* The migration container: in the hook Job, or as an init container of
the operator and gateway when the bundled PostgreSQL starts with the release.
It brings the schema up to date (idempotent, serialised by an advisory lock,
so replicas running it together apply each migration once) and creates the
S3 bucket when it is missing. */}}
{{- define "picobot.migrateContainer" -}}
- name: migrate
  image: {{ include "picobot.imageRef" (dict "ctx" . "image" .Values.image) }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["/picobot"]
  args:
    - migrate
    - --app-role={{ .Values.postgres.appRole }}
  env:
    {{- include "picobot.env.postgresOwnerURL" . | nindent 4 }}
    {{- include "picobot.env.s3" . | trim | nindent 4 }}
  securityContext:
    {{- include "picobot.containerSecurityContext" . | nindent 4 }}
  resources:
    {{- toYaml .Values.migrations.resources | nindent 4 }}
{{- end }}

{{/* Whether migrations run as init containers (bundled PostgreSQL). */}}
{{- define "picobot.migrateInit" -}}
{{- if and .Values.migrations.enabled .Values.postgres.bundled.enabled }}true{{ end }}
{{- end }}

{{/* The gateway's externally reachable root URL: gateway.publicURL, else
the Ingress host (https with TLS), else none. */}}
{{- define "picobot.gateway.publicURL" -}}
{{- $gw := .Values.gateway }}
{{- if $gw.publicURL }}
{{- $gw.publicURL | trimSuffix "/" }}
{{- else if $gw.ingress.enabled }}
{{- printf "%s://%s" (ternary "https" "http" (ne $gw.ingress.tls.secretName "")) $gw.ingress.host }}
{{- end }}
{{- end }}

{{/* The runtime policy and the default tenant caps as operator flags. */}}
{{- define "picobot.operator.policyArgs" -}}
{{- $p := .Values.runtimePolicy -}}
{{- with $p.allowedImages }}
- --allowed-images={{ join "," . }}
{{- end }}
{{- with $p.allowedRuntimeClasses }}
- --allowed-runtime-classes={{ join "," . }}
{{- end }}
{{- with $p.defaultResources.requests }}
- --default-requests={{ include "picobot.resourceList" . }}
{{- end }}
{{- with $p.defaultResources.limits }}
- --default-limits={{ include "picobot.resourceList" . }}
{{- end }}
{{- with $p.maxResources }}
- --max-resources={{ include "picobot.resourceList" . }}
{{- end }}
- --max-warm-pods-per-agent={{ $p.maxWarmPodsPerAgent }}
- --max-sessions-per-agent={{ $p.maxSessionsPerAgent }}
- --max-warm-pods-per-namespace={{ $p.maxWarmPodsPerNamespace }}
- --max-sessions-per-namespace={{ $p.maxSessionsPerNamespace }}
- --sandbox-placement={{ $p.sandboxPlacement | default "container" }}
{{- with .Values.quotaDefaults }}
{{- if ge (int .maxSessionPods) 0 }}
- --default-max-session-pods={{ .maxSessionPods }}
{{- end }}
{{- if ge (int .maxWarmPods) 0 }}
- --default-max-warm-pods={{ .maxWarmPods }}
{{- end }}
{{- if ge (int .maxBrowserPods) 0 }}
- --default-max-browser-pods={{ .maxBrowserPods }}
{{- end }}
{{- if ge (int .maxCronJobs) 0 }}
- --default-max-cronjobs={{ .maxCronJobs }}
{{- end }}
{{- end }}
{{- end }}

{{/* A resource list as name=quantity,... */}}
{{- define "picobot.resourceList" -}}
{{- $out := list -}}
{{- range $k, $v := . }}{{ $out = append $out (printf "%s=%v" $k $v) }}{{ end -}}
{{- join "," $out -}}
{{- end }}

{{/*
"true" when a Prometheus Operator kind, (dict "ctx" $ "kind" "PodMonitor"),
may be rendered: the cluster serves monitoring.coreos.com/v1 <kind>, or
monitoring.force says it will. Without the check an install or upgrade on a
cluster without the CRD fails with no matches for kind.
*/}}
{{- define "picobot.monitoring.serves" -}}
{{- if or .ctx.Values.monitoring.force (.ctx.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind)) }}true{{ end }}
{{- end }}

{{/*
Labels of a monitoring object of a component: the chart's and
monitoring.labels (what a Prometheus selects them by).
*/}}
{{- define "picobot.monitoring.labels" -}}
{{ include "picobot.labels" . }}
{{- with .ctx.Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* OpenTelemetry settings of the gateway and the operator (which passes
every OTEL_* variable on to session pods); nothing while tracing is off. */}}
{{- define "picobot.env.tracing" -}}
{{- with .Values.tracing }}
{{- if .otlp.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .otlp.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .otlp.protocol | quote }}
{{- with .sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- with .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The platform's default quota (quotaDefaults) as PICOBOT_QUOTA_DEFAULTS,
a TenantQuota spec in JSON, for the gateway (session and message caps) and
the operator, which passes it on to session pods (the model budget); caps
of -1 are left out (no cap), and nothing when no default is set. */}}
{{- define "picobot.env.quotaDefaults" -}}
{{- $q := .Values.quotaDefaults -}}
{{- $d := dict -}}
{{- range $k := list "maxConcurrentSessions" "messagesPerMinute" "maxSessionPods" "maxWarmPods" "maxBrowserPods" "maxCronJobs" }}
{{- $v := get $q $k }}
{{- if and (or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v)) (ge (int64 $v) 0) }}
{{- $_ := set $d $k (int64 $v) }}
{{- end }}
{{- end }}
{{- with $q.budget }}
{{- $_ := set $d "budget" . }}
{{- end }}
{{- if $d }}
- name: PICOBOT_QUOTA_DEFAULTS
  value: {{ toJson $d | quote }}
{{- end }}
{{- end }}

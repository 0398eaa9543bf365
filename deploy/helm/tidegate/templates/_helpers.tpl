{{/*
Names, labels and the per-service view of the values. Every template goes through these so
that names and selectors stay consistent.
*/}}

{{- define "tidegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name; short enough to leave room for "-topology-cache-webhook". */}}
{{- define "tidegate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tidegate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object of the release. */}}
{{- define "tidegate.labels" -}}
helm.sh/chart: {{ include "tidegate.chart" . }}
app.kubernetes.io/name: {{ include "tidegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tidegate
{{- end }}

{{/*
The services: values key -> service name (console script tidegate-<name>, component label).
*/}}
{{- define "tidegate.services" -}}
watcher: watcher
topologyCache: topology-cache
admission: admission
preemption: preemption
ungater: ungater
{{- end }}

{{/* Selector labels of one service; call with (dict "root" $ "name" "watcher"). */}}
{{- define "tidegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidegate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{/* All labels of one service's objects; call with (dict "root" $ "name" "watcher"). */}}
{{- define "tidegate.serviceLabels" -}}
{{ include "tidegate.labels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{/*
One service's values are `defaults` with each of the service's own keys replacing the default's
key as a whole (a shallow merge, so false and 0 override too). Templates compute this dict in
place (deepCopy of defaults, then set each service key) rather than through include + fromYaml,
which would turn every number into a float.
*/}}

{{/* The name prefix of cluster-scoped objects: namespaced too, so two releases never collide. */}}
{{- define "tidegate.clusterName" -}}
{{- printf "%s-%s" (include "tidegate.fullname" .) .Release.Namespace | trimSuffix "-" }}
{{- end }}

{{/* The ServiceAccount name of one service; call with (dict "root" $ "key" "watcher" "name" "watcher"). */}}
{{- define "tidegate.serviceAccountName" -}}
{{- $svc := index .root.Values.services .key }}
{{- if .root.Values.serviceAccount.create }}
{{- default (printf "%s-%s" (include "tidegate.fullname" .root) .name) $svc.serviceAccountName }}
{{- else }}
{{- required (printf "services.%s.serviceAccountName is required when serviceAccount.create is false" .key) $svc.serviceAccountName }}
{{- end }}
{{- end }}

{{/* The settings file of one service: top-level `config` with the service's `config` keys over it. */}}
{{- define "tidegate.serviceConfig" -}}
{{- $config := deepCopy (default dict .root.Values.config) }}
{{- range $key, $value := (default dict (index .root.Values.services .key).config) }}
{{- $_ := set $config $key $value }}
{{- end }}
{{- if $config }}
{{- toYaml $config }}
{{- else -}}
{}
{{- end }}
{{- end }}

{{- define "tidegate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "tidegate.webhookServiceName" -}}
{{- printf "%s-ungater-webhook" (include "tidegate.fullname" .) }}
{{- end }}

{{/* The Secret with the webhook's serving certificate: the user's, or one the chart or cert-manager makes. */}}
{{- define "tidegate.webhookSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "tidegate.fullname" .)) .Values.webhook.certificate.existingSecret }}
{{- end }}

{{- define "tidegate.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "tidegate.fullname" .) }}
{{- end }}

{{/*
Checks of combinations that values.schema.json cannot express; each failure names the values
to change.
*/}}
{{- define "tidegate.validate" -}}
{{- if and .Values.webhook.enabled (not .Values.services.ungater.enabled) }}
{{- fail "webhook.enabled needs services.ungater.enabled: the ungater serves the webhook" }}
{{- end }}
{{- if .Values.webhook.enabled }}
{{- $cert := .Values.webhook.certificate }}
{{- if and $cert.certManager.enabled $cert.existingSecret }}
{{- fail "webhook.certificate: set either existingSecret or certManager.enabled, not both" }}
{{- end }}
{{- if and $cert.existingSecret (not $cert.caBundle) }}
{{- $injected := false }}
{{- range $key, $_ := .Values.webhook.annotations }}
{{- if hasPrefix "cert-manager.io/inject-ca-from" $key }}
{{- $injected = true }}
{{- end }}
{{- end }}
{{- if not $injected }}
{{- fail "webhook.certificate.caBundle is required with webhook.certificate.existingSecret: the base64 PEM of the CA that signed the certificate (or a cert-manager.io/inject-ca-from* annotation in webhook.annotations)" }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.nats.creds.secretName .Values.nats.userPassword.secretName }}
{{- fail "nats: set either creds.secretName or userPassword.secretName, not both" }}
{{- end }}
{{- end }}

{{/* The environment that points a process at NATS (URL, replicas, credentials, TLS); the
argument is the root context. Used by every service and the console. */}}
{{- define "tidegate.natsEnv" -}}
- name: TIDEGATE_NATS_URL
  value: {{ $.Values.nats.url | quote }}
- name: TIDEGATE_NATS_STREAM_REPLICAS
  value: {{ $.Values.nats.streamReplicas | quote }}
{{- if $.Values.nats.creds.secretName }}
- name: TIDEGATE_NATS_CREDS
  value: /etc/tidegate/nats-creds/{{ $.Values.nats.creds.key }}
{{- end }}
{{- with $.Values.nats.userPassword }}
{{- if .secretName }}
- name: TIDEGATE_NATS_USER
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .usernameKey }}
- name: TIDEGATE_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .passwordKey }}
{{- end }}
{{- end }}
{{- with $.Values.nats.tls }}
{{- if .secretName }}
{{- if .caKey }}
- name: TIDEGATE_NATS_TLS_CA
  value: /etc/tidegate/nats-tls/{{ .caKey }}
{{- end }}
{{- if and .certKey .keyKey }}
- name: TIDEGATE_NATS_TLS_CERT
  value: /etc/tidegate/nats-tls/{{ .certKey }}
- name: TIDEGATE_NATS_TLS_KEY
  value: /etc/tidegate/nats-tls/{{ .keyKey }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The mounts of the NATS credentials and TLS files (root context). */}}
{{- define "tidegate.natsMounts" -}}
{{- if $.Values.nats.creds.secretName }}
- name: nats-creds
  mountPath: /etc/tidegate/nats-creds
  readOnly: true
{{- end }}
{{- if $.Values.nats.tls.secretName }}
- name: nats-tls
  mountPath: /etc/tidegate/nats-tls
  readOnly: true
{{- end }}
{{- end }}

{{/* The volumes of the NATS credentials and TLS Secrets (root context). */}}
{{- define "tidegate.natsVolumes" -}}
{{- if $.Values.nats.creds.secretName }}
- name: nats-creds
  secret:
    secretName: {{ $.Values.nats.creds.secretName }}
    items:
      - key: {{ $.Values.nats.creds.key }}
        path: {{ $.Values.nats.creds.key }}
{{- end }}
{{- if $.Values.nats.tls.secretName }}
- name: nats-tls
  secret:
    secretName: {{ $.Values.nats.tls.secretName }}
{{- end }}
{{- end }}

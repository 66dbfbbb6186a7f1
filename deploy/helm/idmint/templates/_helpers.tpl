{{/* Names and labels, as `helm create` makes them. */}}
{{- define "idmint.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "idmint.fullname" -}}
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

{{- define "idmint.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idmint.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "idmint.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "idmint.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "idmint.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Where the Secrets are mounted (read-only). The environment names these
files, never their contents.
*/}}
{{- define "idmint.databaseDir" -}}/etc/idmint/database{{- end }}
{{- define "idmint.monitorTokenDir" -}}/etc/idmint/monitor-token{{- end }}
{{- define "idmint.tlsDir" -}}/etc/idmint/tls{{- end }}
{{- define "idmint.clientCADir" -}}/etc/idmint/client-ca{{- end }}
{{- define "idmint.probeTLSDir" -}}/etc/idmint/probe-tls{{- end }}

{{/*
shutdownBudget: the longest a pod takes to stop once it is told to, in
seconds: the preStop sleep, then serve's two phases (drain in-flight
requests, then release the worker ID, give segments back and close the
database), each bounded by --shutdown-timeout, and 5 s for the process to
exit and the kubelet to see it.
*/}}
{{- define "idmint.shutdownBudget" -}}
{{- add (int .Values.preStopSleepSeconds) (mul 2 (int .Values.shutdownTimeoutSeconds)) 5 }}
{{- end }}

{{- define "idmint.terminationGrace" -}}
{{- $budget := include "idmint.shutdownBudget" . | int }}
{{- $set := int .Values.terminationGracePeriodSeconds }}
{{- if eq $set 0 }}{{ $budget }}{{ else }}{{ $set }}{{ end }}
{{- end }}

{{/*
execReadiness: the readiness probe runs `idmint healthcheck` in the
container, since the kubelet cannot send the monitor token (it would be
inlined in the pod spec) nor a client certificate. execAll: every probe
does, since under mTLS the kubelet cannot even connect.
*/}}
{{- define "idmint.execAll" -}}
{{- if .Values.tls.clientCA.existingSecret }}true{{ end }}
{{- end }}

{{- define "idmint.execReadiness" -}}
{{- if or .Values.auth.protectMonitoring (include "idmint.execAll" .) }}true{{ end }}
{{- end }}

{{/*
liveHandler asks /id/live, for the startup and liveness probes: over
HTTP(S) by the kubelet, or by `idmint healthcheck` in the container under
mTLS. Its argument: root (the chart's context) and timeout (the probe's,
in seconds; healthcheck gives up a second before it).
*/}}
{{- define "idmint.liveHandler" -}}
{{- $root := .root }}
{{- if include "idmint.execAll" $root }}
exec:
  command:
    - /idmint
    - healthcheck
    - --healthcheck-url=https://127.0.0.1:{{ $root.Values.port }}/id/live
    - --healthcheck-timeout={{ max 1 (sub (int .timeout) 1) }}s
{{- else }}
httpGet:
  path: /id/live
  port: http
  scheme: {{ include "idmint.scheme" $root }}
{{- end }}
{{- end }}

{{- define "idmint.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* The flags the chart sets itself: not to be given again in config. */}}
{{- define "idmint.ownedFlags" -}}
database-url,listen,instance,auth,protect-monitoring,migrate,shutdown-timeout,tls-cert,tls-key,tls-client-ca,grpc-listen,token,cert,key
{{- end }}

{{/* validate fails rendering with a message saying what to set. */}}
{{- define "idmint.validate" -}}
{{- if not .Values.database.existingSecret }}
{{- fail "database.existingSecret is required: the name of a Secret whose key (database.key, default \"url\") holds a postgres:// URL. idmint on Kubernetes needs PostgreSQL: the SQLite file is for one machine, and the pods' root filesystem is read-only." }}
{{- end }}
{{- if not (has .Values.auth.mode (list "open" "token")) }}
{{- fail (printf "auth.mode %q: want open or token" .Values.auth.mode) }}
{{- end }}
{{- if and .Values.auth.protectMonitoring (not .Values.auth.monitorToken.existingSecret) }}
{{- fail "auth.protectMonitoring needs auth.monitorToken.existingSecret: a Secret holding a token with the monitor scope, for the readiness probe (and the ServiceMonitor)." }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled needs tls.existingSecret: a kubernetes.io/tls Secret (tls.crt, tls.key)." }}
{{- end }}
{{- if and .Values.tls.clientCA.existingSecret (not .Values.tls.enabled) }}
{{- fail "tls.clientCA needs tls.enabled: client certificates are asked for over TLS only." }}
{{- end }}
{{- if and (include "idmint.execAll" .) (not .Values.tls.probeCertificate.existingSecret) }}
{{- fail "tls.clientCA needs tls.probeCertificate.existingSecret: under mTLS the kubelet's HTTP probes cannot connect, so the probes run `idmint healthcheck` with a client certificate the client CA signed (a kubernetes.io/tls Secret)." }}
{{- end }}
{{- if lt (int .Values.shutdownTimeoutSeconds) 1 }}
{{- fail "shutdownTimeoutSeconds: want at least 1" }}
{{- end }}
{{- $budget := include "idmint.shutdownBudget" . | int }}
{{- $grace := include "idmint.terminationGrace" . | int }}
{{- if lt $grace $budget }}
{{- fail (printf "terminationGracePeriodSeconds %d is shorter than preStopSleepSeconds + 2 × shutdownTimeoutSeconds + 5 = %d: the kubelet would kill idmint before it releases its worker ID and gives its segments back (leave it 0 for the sum)" $grace $budget) }}
{{- end }}
{{- $owned := splitList "," (include "idmint.ownedFlags" .) }}
{{- range $flag, $_ := .Values.config }}
{{- if has $flag $owned }}
{{- fail (printf "config.%s: the chart sets --%s itself; use its own value (docs/kubernetes.md)" $flag $flag) }}
{{- end }}
{{- if not (regexMatch "^[a-z][a-z0-9-]*$" $flag) }}
{{- fail (printf "config.%s: want a flag name of serve, as docs/cli.md lists them (lower case, with -)" $flag) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The release's name, cut to what a Kubernetes name may hold. */}}
{{- define "switchyard.fullname" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "switchyard.labels" -}}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Memory request and limit: max_memory plus the server's overhead. */}}
{{- define "switchyard.memory" -}}
{{- printf "%dMi" (add .Values.resources.maxMemoryMiB .Values.resources.overheadMiB) -}}
{{- end -}}

{{/* The grace period: the whole stop (preStop wait, drain, snapshots) and a margin. */}}
{{- define "switchyard.gracePeriod" -}}
{{- add .Values.stop.preStopSeconds .Values.stop.drainSeconds .Values.stop.snapshotSeconds .Values.stop.marginSeconds -}}
{{- end -}}

{{/* Startup probe failures allowed: loadSeconds rounded up to whole periods. */}}
{{- define "switchyard.startupFailures" -}}
{{- div (add .Values.probes.loadSeconds (sub .Values.probes.periodSeconds 1)) .Values.probes.periodSeconds -}}
{{- end -}}

{{/* The configuration file: the [host] section this chart owns, then the models. */}}
{{- define "switchyard.ini" -}}
[host]
listen = 0.0.0.0:{{ .Values.port | int }}
resume_path = /var/lib/switchyard/resume
resume_max_bytes = {{ .Values.resume.maxBytesPerModelMiB | int }}M
max_memory = {{ .Values.resources.maxMemoryMiB | int }}M
drain_timeout = {{ .Values.stop.drainSeconds | int }}
{{- range $key, $value := .Values.hostConfig }}
{{ $key }} = {{ $value }}
{{- end }}

{{ .Values.models }}
{{- end -}}

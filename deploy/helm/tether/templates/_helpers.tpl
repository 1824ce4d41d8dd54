{{/* Names: the release name, plus "-tether" unless it already says tether. */}}
{{- define "tether.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tether.natsName" -}}
{{- printf "%s-nats" (include "tether.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tether.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: tether
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "tether.selectorLabels" -}}
app.kubernetes.io/name: tether
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: edge
{{- end -}}

{{- define "tether.natsSelectorLabels" -}}
app.kubernetes.io/name: tether-nats
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nats
{{- end -}}

{{/* The NATS address the edges join: the chart's own server, or nats.url; empty: none. */}}
{{- define "tether.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s:4222" (include "tether.natsName" .) -}}
{{- else -}}
{{- .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{/* The rendered tether.toml. */}}
{{- define "tether.config" -}}
{{- tpl .Values.config . -}}
{{- end -}}

{{/*
Checks that fail the render instead of shipping a deployment that cannot
work: listen on loopback, several edges without NATS, or a grace period that
would kill a drain.
*/}}
{{- define "tether.check" -}}
{{- $toml := include "tether.config" . -}}
{{- $parsed := fromToml $toml -}}
{{- if $parsed.Error -}}
{{- fail (printf "config is not valid TOML: %s" $parsed.Error) -}}
{{- end -}}
{{- $listen := $parsed.listen | default "127.0.0.1:7878" | toString -}}
{{- if not (or (hasPrefix "0.0.0.0:" $listen) (hasPrefix "[::]:" $listen)) -}}
{{- fail (printf "config: listen = %q is unreachable from outside the pod; use \"0.0.0.0:%v\"" $listen .Values.port) -}}
{{- end -}}
{{- if ne (printf ":%v" .Values.port) (printf ":%s" (regexReplaceAll "^.*:" $listen "")) -}}
{{- fail (printf "config: listen = %q is not on port %v (values port)" $listen .Values.port) -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not (include "tether.natsUrl" .)) -}}
{{- fail "replicas > 1 needs NATS: set nats.enabled, or nats.url" -}}
{{- end -}}
{{- $limits := $parsed.limits | default dict -}}
{{- $drainMs := $limits.drain_timeout_ms | default 12000 | int -}}
{{- $needed := add (int .Values.preStopSleepSeconds) (div (add $drainMs 999) 1000) 5 -}}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "terminationGracePeriodSeconds %v must be more than preStopSleepSeconds + drain_timeout_ms/1000 + 5 = %v" .Values.terminationGracePeriodSeconds $needed) -}}
{{- end -}}
{{- end -}}

{{/* The NATS servers' configuration. */}}
{{- define "tether.natsConf" -}}
{{- $name := include "tether.natsName" . -}}
{{- $replicas := int .Values.nats.replicas -}}
# Core NATS only: tether uses request/reply and interest, no JetStream.
server_name: $POD_NAME
port: 4222
http_port: 8222
{{- if gt $replicas 1 }}
cluster {
  name: {{ $name }}
  port: 6222
  no_advertise: true
  routes: [
    {{- range $i := until $replicas }}
    nats://{{ $name }}-{{ $i }}.{{ $name }}-headless:6222
    {{- end }}
  ]
}
{{- end }}
{{- end -}}

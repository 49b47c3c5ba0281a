{{/* Names: the usual Helm conventions, truncated to the 63 characters a label allows. */}}
{{- define "synthetic-sla-probe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "synthetic-sla-probe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "synthetic-sla-probe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "synthetic-sla-probe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: synthetic-sla-probe
{{- end -}}

{{- define "synthetic-sla-probe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "synthetic-sla-probe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The probe pods only: the helm test pod carries a different component. */}}
{{- define "synthetic-sla-probe.probeSelectorLabels" -}}
{{ include "synthetic-sla-probe.selectorLabels" . }}
app.kubernetes.io/component: probe
{{- end -}}

{{- define "synthetic-sla-probe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "synthetic-sla-probe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "synthetic-sla-probe.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "synthetic-sla-probe.keySecretName" -}}
{{- .Values.signingKeys.existingSecret | default (printf "%s-keys" (include "synthetic-sla-probe.fullname" .)) -}}
{{- end -}}

{{- define "synthetic-sla-probe.configName" -}}
{{- printf "%s-config" (include "synthetic-sla-probe.fullname" .) -}}
{{- end -}}

{{/* The scrape job the probe-down and probe-absent alerts select (see serviceMonitor jobLabel). */}}
{{- define "synthetic-sla-probe.job" -}}
{{- .Values.alerts.job | default (include "synthetic-sla-probe.name" .) -}}
{{- end -}}

{{- define "synthetic-sla-probe.metricsPort" -}}
{{- .Values.service.port -}}
{{- end -}}

{{/*
The probe's config file: the user's `config` with the settings the chart owns laid over
it. The metrics section is the chart's: the port must match the container port and the
Service, and latency_threshold (sink.latency_threshold for the Spark sink) must be the
SLO threshold the rules read a bucket at.
With Spark on, the sink stage is added with spark.allowedLatenessSeconds as its allowed
lateness, which the probe's watermark-skew threshold (the skew SLO's) is twice of unless
config.sink.skew_threshold sets it.
*/}}
{{- define "synthetic-sla-probe.configFile" -}}
{{- $config := deepCopy .Values.config -}}
{{- if not (or (dig "kafka" "bootstrap_servers" "" $config) (dig "mqtt" "url" "" $config)) -}}
{{- fail "config.kafka.bootstrap_servers (or config.mqtt.url) is required, e.g. kafka-0.kafka:9092" -}}
{{- end -}}
{{- /* The values' placeholder "" means "not given": the probe refuses a blank list. */ -}}
{{- if and (hasKey $config "kafka") (not (dig "kafka" "bootstrap_servers" "" $config)) -}}
{{- $_ := unset (get $config "kafka") "bootstrap_servers" -}}
{{- end -}}
{{- if and (or (dig "kafka" "sasl" nil $config) (dig "mqtt" "password" nil $config)) (not .Values.storeConfigInSecret) -}}
{{- fail "config holds a password (kafka.sasl or mqtt.password): set storeConfigInSecret=true so the config goes into a Secret" -}}
{{- end -}}
{{- $metrics := dict "host" "0.0.0.0" "port" (int .Values.service.port) "latency_threshold" .Values.slo.latency.thresholdSeconds -}}
{{- $_ := set $config "metrics" (mergeOverwrite (dig "metrics" (dict) $config) $metrics) -}}
{{- $_ := set $config "sink" (mergeOverwrite (dig "sink" (dict) $config) (dict "latency_threshold" .Values.slo.latency.sinkThresholdSeconds)) -}}
{{- if .Values.spark.enabled -}}
{{- if not (dig "sink" "path" "" $config) -}}
{{- fail "spark.enabled needs config.sink.path: where the sink's tables and checkpoint live (e.g. s3a://bucket/sla-sink, or a path on a volume from extraVolumes)" -}}
{{- end -}}
{{- $stages := dig "stages" (list "consumer") $config -}}
{{- if kindIs "string" $stages }}{{ $stages = splitList "," $stages }}{{ end -}}
{{- $_ := set $config "stages" (append (without $stages "sink") "sink") -}}
{{- $_ := set $config "sink" (mergeOverwrite (dig "sink" (dict) $config) (dict "allowed_lateness" .Values.spark.allowedLatenessSeconds)) -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "synthetic-sla-probe.configChecksum" -}}
{{- list (include "synthetic-sla-probe.configFile" .) .Values.signingKeys.keyRing | toJson | sha256sum -}}
{{- end -}}

{{/* Volumes and mounts shared by the probe and the helm test pod. */}}
{{- define "synthetic-sla-probe.volumes" -}}
- name: config
  {{- if .Values.storeConfigInSecret }}
  secret:
    secretName: {{ include "synthetic-sla-probe.configName" . }}
  {{- else }}
  configMap:
    name: {{ include "synthetic-sla-probe.configName" . }}
  {{- end }}
- name: signing-keys
  secret:
    secretName: {{ include "synthetic-sla-probe.keySecretName" . }}
    defaultMode: 0400
    items:
      - key: keys.json
        path: keys.json
{{- if .Values.spark.enabled }}
- name: spark-scratch
  emptyDir:
    sizeLimit: {{ .Values.spark.scratchSizeLimit }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "synthetic-sla-probe.volumeMounts" -}}
- name: config
  mountPath: /etc/sla-probe/config
  readOnly: true
- name: signing-keys
  mountPath: /etc/sla-probe/keys
  readOnly: true
{{- if .Values.spark.enabled }}
- name: spark-scratch
  mountPath: /tmp
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Environment shared by the probe and the helm test pod; every flag is also SLA_PROBE_<FLAG>. */}}
{{- define "synthetic-sla-probe.env" -}}
- name: SLA_PROBE_CONFIG
  value: /etc/sla-probe/config/probe.yaml
- name: SLA_PROBE_SIGNING_KEY_FILE
  value: /etc/sla-probe/keys/keys.json
{{- if .Values.spark.enabled }}
- name: SPARK_LOCAL_DIRS
  value: /tmp/spark
# The driver's own stack: Spark's regex over a long interrupt message can overflow the
# default one when a query stops mid-batch (SPARK-48717).
- name: JAVA_TOOL_OPTIONS
  value: -Djava.io.tmpdir=/tmp -Xss4m
{{- end }}
{{- with .Values.tracing }}
{{- if .enabled }}
- name: OTEL_TRACES_EXPORTER
  value: otlp
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ required "tracing.endpoint is required when tracing.enabled" .endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .protocol | quote }}
{{- with .sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- with .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | quote }}
{{- end }}
{{- with .resourceAttributes }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ . | quote }}
{{- end }}
{{- if .headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .headersSecret.name | quote }}
      key: {{ .headersSecret.key | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "synthetic-sla-probe.resources" -}}
{{- if .Values.spark.enabled -}}
{{- toYaml .Values.spark.resources -}}
{{- else -}}
{{- toYaml .Values.resources -}}
{{- end -}}
{{- end -}}

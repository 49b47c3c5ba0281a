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

{{/* The probe pods only: the sink and the helm test pod carry other components. */}}
{{- define "synthetic-sla-probe.probeSelectorLabels" -}}
{{ include "synthetic-sla-probe.selectorLabels" . }}
app.kubernetes.io/component: probe
{{- end -}}

{{/* The Spark sink's pod (spark.enabled). */}}
{{- define "synthetic-sla-probe.sinkSelectorLabels" -}}
{{ include "synthetic-sla-probe.selectorLabels" . }}
app.kubernetes.io/component: sink
{{- end -}}

{{/* The sink's Deployment and Service: the release's name with -sink, within 63 characters. */}}
{{- define "synthetic-sla-probe.sinkName" -}}
{{- printf "%s-sink" (include "synthetic-sla-probe.fullname" . | trunc 58 | trimSuffix "-") -}}
{{- end -}}

{{/*
The sink's image: spark.s3a.connector=image with no image.tag takes the S3A build of
the chart's version (<appVersion>-s3a, Dockerfile --build-arg S3A=true).
*/}}
{{- define "synthetic-sla-probe.sinkImage" -}}
{{- if and (eq .Values.spark.s3a.connector "image") (not .Values.image.tag) -}}
{{- printf "%s:%s-s3a" .Values.image.repository .Chart.AppVersion -}}
{{- else -}}
{{- include "synthetic-sla-probe.image" . -}}
{{- end -}}
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
{{/*
The `target` labels of this release's probes, as a regular expression for the rules of
ruleScope "release": config.target unless config.targets leaves kafka out, and
config.mqtt.target (default "mqtt") when an MQTT broker is probed (config.mqtt.url).
*/}}
{{- define "synthetic-sla-probe.targetPattern" -}}
{{- $config := .Values.config -}}
{{- $targets := list -}}
{{- $kinds := $config.targets | default list -}}
{{- if kindIs "string" $kinds }}{{ $kinds = splitList "," $kinds }}{{ end -}}
{{- if or (not $kinds) (has "kafka" $kinds) -}}
{{- $targets = append $targets ($config.target | default "kafka") -}}
{{- end -}}
{{- if dig "mqtt" "url" "" $config -}}
{{- $targets = append $targets (dig "mqtt" "target" "mqtt" $config) -}}
{{- end -}}
{{- $quoted := list -}}
{{- range $targets }}{{ $quoted = append $quoted (regexQuoteMeta .) }}{{ end -}}
{{- join "|" $quoted -}}
{{- end -}}

{{- define "synthetic-sla-probe.job" -}}
{{- .Values.alerts.job | default (include "synthetic-sla-probe.name" .) -}}
{{- end -}}

{{- define "synthetic-sla-probe.metricsPort" -}}
{{- .Values.service.port -}}
{{- end -}}

{{/*
The settings every config file of the release shares: the user's `config` with the
settings the chart owns laid over it, put into .out.config (a dict, so numbers keep
their types). The metrics section is the chart's: the port must match the container
port and the Service, and latency_threshold (sink.latency_threshold for the Spark sink,
mirror.latency_threshold for the mirror stage) must be the SLO threshold the rules read
a bucket at, and slo's objectives the rules'
(the status page's budgets); so are group.commit_latency_threshold and
group.commit_latency_objective (slo.groupCommit), and tiered.threshold
(alerts.tieredReadsSlow.thresholdSeconds). group.id "" is left out (the probe
derives one from its probe id), and a fixed one is refused with more than one replica,
as is a fixed transactions.id (the transactional stage's producers would fence each
other).
`stages`, if given, comes out as
a list without the sink: the sink runs only in its own workload (spark.enabled).
The sink's allowed lateness is spark.allowedLatenessSeconds, which the watermark-skew
threshold (the skew SLO's) is twice of unless config.sink.skew_threshold sets it.
*/}}
{{- define "synthetic-sla-probe.baseConfig" -}}
{{- $values := .root.Values -}}
{{- $config := deepCopy $values.config -}}
{{- if not (or (dig "kafka" "bootstrap_servers" "" $config) (dig "mqtt" "url" "" $config)) -}}
{{- fail "config.kafka.bootstrap_servers (or config.mqtt.url) is required, e.g. kafka-0.kafka:9092" -}}
{{- end -}}
{{- /* The values' placeholder "" means "not given": the probe refuses a blank list. */ -}}
{{- if and (hasKey $config "kafka") (not (dig "kafka" "bootstrap_servers" "" $config)) -}}
{{- $_ := unset (get $config "kafka") "bootstrap_servers" -}}
{{- end -}}
{{- if and (or (dig "kafka" "sasl" "password" nil $config) (dig "mirror" "sasl" "password" nil $config) (dig "mqtt" "password" nil $config) (dig "once" "push_gateway" "password" nil $config)) (not $values.storeConfigInSecret) -}}
{{- fail "config holds a password (kafka.sasl.password, mirror.sasl.password, mqtt.password or once.push_gateway.password): take it from a Secret (kafka.sasl.existingSecret, mirror.sasl.existingSecret, mqtt.existingSecret, smokeTest.pushGateway.existingSecret), or set storeConfigInSecret=true so the config goes into a Secret" -}}
{{- end -}}
{{- include "synthetic-sla-probe.secretFiles" (dict "values" $values "config" $config) -}}
{{- $metrics := dict "host" "0.0.0.0" "port" (int $values.service.port) "latency_threshold" $values.slo.latency.thresholdSeconds -}}
{{- if include "synthetic-sla-probe.webConfigOn" .root -}}
{{- $_ := set $metrics "web_config_file" (printf "/etc/sla-probe/web/%s" $values.webConfig.key) -}}
{{- end -}}
{{- $_ := set $config "metrics" (mergeOverwrite (dig "metrics" (dict) $config) $metrics) -}}
{{- $_ := set $config "sink" (mergeOverwrite (dig "sink" (dict) $config) (dict "latency_threshold" $values.slo.latency.sinkThresholdSeconds)) -}}
{{- $mirrorThreshold := $values.slo.latency.mirrorThresholdSeconds | default $values.slo.latency.thresholdSeconds -}}
{{- $_ := set $config "mirror" (mergeOverwrite (dig "mirror" (dict) $config) (dict "latency_threshold" $mirrorThreshold)) -}}
{{- /* The status page counts budgets against the objectives the rules alert on. */ -}}
{{- $objectives := dict "availability_objective" $values.slo.availability.objective "latency_objective" $values.slo.latency.objective -}}
{{- $_ := set $config "slo" (mergeOverwrite (dig "slo" (dict) $config) $objectives) -}}
{{- /* The group stage's commit histogram has a bucket on the threshold the rules read. */ -}}
{{- $group := dig "group" (dict) $config -}}
{{- range list "commit_latency_threshold" "commit_latency_objective" -}}
{{- if hasKey $group . -}}
{{- fail (printf "config.group.%s is set by the chart: set slo.groupCommit (thresholdSeconds, objective), which the rules alert on" .) -}}
{{- end -}}
{{- end -}}
{{- if not (dig "id" "" $group) -}}
{{- $_ := unset $group "id" -}}
{{- else if gt (int $values.replicaCount) 1 -}}
{{- fail "config.group.id with replicaCount above 1: the replicas would share one consumer group and split the partitions, each missing its canaries on the others' partitions. Leave it empty: each probe's group is then its own (derived from its probe id)" -}}
{{- end -}}
{{- $_ := set $group "commit_latency_threshold" $values.slo.groupCommit.thresholdSeconds -}}
{{- $_ := set $group "commit_latency_objective" $values.slo.groupCommit.objective -}}
{{- $_ := set $config "group" $group -}}
{{- /* The tiered read's histogram has a bucket on the threshold its slow alert reads. */ -}}
{{- $tiered := dig "tiered" (dict) $config -}}
{{- if hasKey $tiered "threshold" -}}
{{- fail "config.tiered.threshold is set by the chart: set alerts.tieredReadsSlow.thresholdSeconds, which the rules alert on" -}}
{{- end -}}
{{- $_ := set $tiered "threshold" $values.alerts.tieredReadsSlow.thresholdSeconds -}}
{{- $_ := set $config "tiered" $tiered -}}
{{- if and (dig "transactions" "id" "" $config) (gt (int $values.replicaCount) 1) -}}
{{- fail "config.transactions.id with replicaCount above 1: each replica's producer would fence the others' and fail their transactions. Leave it unset: each probe's transactional id is then its own (derived from its probe id)" -}}
{{- end -}}
{{- if hasKey $config "stages" -}}
{{- $given := $config.stages -}}
{{- if kindIs "string" $given }}{{ $given = splitList "," $given }}{{ end -}}
{{- $stages := list -}}
{{- range $given }}{{ $stages = append $stages (trim .) }}{{ end -}}
{{- if and (has "sink" $stages) (not $values.spark.enabled) -}}
{{- fail "config.stages: the sink stage runs in its own workload: set spark.enabled=true (and config.sink.path) instead of listing sink" -}}
{{- end -}}
{{- $_ := set $config "stages" (without $stages "sink") -}}
{{- end -}}
{{- $_ := set .out "config" $config -}}
{{- end -}}

{{/*
Points the config (.config, changed in place) at the files of kafka.sasl.existingSecret,
kafka.tls.existingSecret, their mirror.* twins (the mirror stage's target cluster),
mqtt.existingSecret and mqtt.tls.existingSecret, refusing a config that gives them
itself: which of two passwords is used must never be a guess.
*/}}
{{- define "synthetic-sla-probe.secretFiles" -}}
{{- $values := .values -}}
{{- $config := .config -}}
{{- range $section := list "kafka" "mirror" -}}
{{- with (get $values $section).sasl.existingSecret.name -}}
{{- $sasl := dig $section "sasl" nil $config -}}
{{- if not (and $sasl (kindIs "map" $sasl)) -}}
{{- fail (printf "%s.sasl.existingSecret needs config.%s.sasl.mechanism and config.%s.sasl.username" $section $section $section) -}}
{{- end -}}
{{- range list "password" "password_file" -}}
{{- if hasKey $sasl . -}}
{{- fail (printf "config.%s.sasl.%s: give the password by %s.sasl.existingSecret or in the config, not both" $section . $section) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $sasl "password_file" (printf "/etc/sla-probe/%s-sasl/password" $section) -}}
{{- end -}}
{{- end -}}
{{- with $values.mqtt.existingSecret.name -}}
{{- $mqtt := dig "mqtt" (dict) $config -}}
{{- range list "password" "password_file" -}}
{{- if hasKey $mqtt . -}}
{{- fail (printf "config.mqtt.%s: give the password by mqtt.existingSecret or in the config, not both" .) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $mqtt "password_file" "/etc/sla-probe/mqtt-password/password" -}}
{{- $_ := set $config "mqtt" $mqtt -}}
{{- end -}}
{{- range $section := list "kafka" "mqtt" "mirror" -}}
{{- $secret := get $values $section | dig "tls" (dict) -}}
{{- if or $secret.existingSecret $secret.caSecret -}}
{{- $parent := dig $section (dict) $config -}}
{{- $tls := dig "tls" (dict) $parent -}}
{{- range list "ca_file" "cert_file" "key_file" -}}
{{- if hasKey $tls . -}}
{{- fail (printf "config.%s.tls.%s is set by %s.tls.existingSecret: leave it out of the config" $section . $section) -}}
{{- end -}}
{{- end -}}
{{- $dir := printf "/etc/sla-probe/%s-tls" $section -}}
{{- if $secret.caSecret -}}
{{- $_ := set $tls "ca_file" (printf "%s-ca/ca.crt" $dir) -}}
{{- else if $secret.caKey -}}
{{- $_ := set $tls "ca_file" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
{{- if and $secret.existingSecret $secret.certKey $secret.keyKey -}}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" $dir) -}}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" $dir) -}}
{{- end -}}
{{- $_ := set $parent "tls" $tls -}}
{{- $_ := set $config $section $parent -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The Secrets of kafka.sasl, kafka.tls, mirror.sasl, mirror.tls, mqtt and mqtt.tls as volumes, each key under the
file name secretFiles points the config at (a key missing from its Secret keeps the pod
from starting, which says why, rather than the probe failing later on a missing file).
*/}}
{{- define "synthetic-sla-probe.secretVolumes" -}}
{{- $volumes := list -}}
{{- range $section := list "kafka" "mirror" -}}
{{- with (get $.Values $section).sasl.existingSecret }}{{ if .name -}}
{{- $volumes = append $volumes (dict "name" (printf "%s-sasl" $section) "secret" (dict "secretName" .name "defaultMode" 256 "items" (list (dict "key" .key "path" "password")))) -}}
{{- end }}{{ end -}}
{{- end -}}
{{- with .Values.mqtt.existingSecret }}{{ if .name -}}
{{- $volumes = append $volumes (dict "name" "mqtt-password" "secret" (dict "secretName" .name "defaultMode" 256 "items" (list (dict "key" .key "path" "password")))) -}}
{{- end }}{{ end -}}
{{- range $section := list "kafka" "mqtt" "mirror" -}}
{{- $secret := get $.Values $section | dig "tls" (dict) -}}
{{- if $secret.caSecret -}}
{{- $volumes = append $volumes (dict "name" (printf "%s-tls-ca" $section) "secret" (dict "secretName" $secret.caSecret "defaultMode" 256 "items" (list (dict "key" ($secret.caKey | default "ca.crt") "path" "ca.crt")))) -}}
{{- end -}}
{{- if $secret.existingSecret -}}
{{- $items := list -}}
{{- if and $secret.caKey (not $secret.caSecret) }}{{ $items = append $items (dict "key" $secret.caKey "path" "ca.crt") }}{{ end -}}
{{- if and $secret.certKey $secret.keyKey -}}
{{- $items = append $items (dict "key" $secret.certKey "path" "tls.crt") -}}
{{- $items = append $items (dict "key" $secret.keyKey "path" "tls.key") -}}
{{- end -}}
{{- $volumes = append $volumes (dict "name" (printf "%s-tls" $section) "secret" (dict "secretName" $secret.existingSecret "defaultMode" 256 "items" $items)) -}}
{{- end -}}
{{- end -}}
{{- if include "synthetic-sla-probe.webConfigOn" . -}}
{{- $volumes = append $volumes (dict "name" "web" "secret" (dict "secretName" (include "synthetic-sla-probe.webConfigSecretName" .) "defaultMode" 256)) -}}
{{- end -}}
{{- with .Values.webConfig.certificateSecret -}}
{{- /* The whole Secret, no items: cert-manager's ca.crt too, for a web config of yours. */ -}}
{{- $volumes = append $volumes (dict "name" "web-tls" "secret" (dict "secretName" . "defaultMode" 256)) -}}
{{- end -}}
{{- with $volumes }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/*
"true" when a web config secures the endpoints (metrics.web_config_file): yours
(webConfig.existingSecret) or the chart's (webConfigFile). Empty otherwise.
*/}}
{{- define "synthetic-sla-probe.webConfigOn" -}}
{{- with .Values.webConfig -}}
{{- if or .existingSecret .certificateSecret .basicAuthUsers }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the endpoints serve TLS (the ServiceMonitor then scrapes https). */}}
{{- define "synthetic-sla-probe.webTls" -}}
{{- with .Values.webConfig -}}
{{- if .existingSecret }}{{ if .tls }}true{{ end }}{{ else if .certificateSecret }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/*
The web config the chart writes (empty when it is yours, existingSecret, or off): the
certificate of webConfig.certificateSecret as mounted (secretVolumes), and the users of
webConfig.basicAuthUsers.
*/}}
{{- define "synthetic-sla-probe.webConfigFile" -}}
{{- $web := .Values.webConfig -}}
{{- if and (not $web.existingSecret) (include "synthetic-sla-probe.webConfigOn" .) -}}
{{- $file := dict -}}
{{- if $web.certificateSecret -}}
{{- $_ := set $file "tls_server_config" (dict "cert_file" "/etc/sla-probe/web-tls/tls.crt" "key_file" "/etc/sla-probe/web-tls/tls.key") -}}
{{- end -}}
{{- with $web.basicAuthUsers -}}
{{- $_ := set $file "basic_auth_users" . -}}
{{- end -}}
{{- toYaml $file -}}
{{- end -}}
{{- end -}}

{{- define "synthetic-sla-probe.webConfigSecretName" -}}
{{- .Values.webConfig.existingSecret | default (printf "%s-web" (include "synthetic-sla-probe.fullname" .)) -}}
{{- end -}}

{{/*
A kubelet probe (.probe: livenessProbe, readinessProbe or startupProbe) of a pod
serving the endpoints. With a web config on, an httpGet probe goes to the health port
(healthPort below) over plain HTTP: the kubelet has no credentials and no client
certificate, and /readyz there keeps its meaning (503 while the brokers are out of
reach), which a TCP check would not.
*/}}
{{- define "synthetic-sla-probe.kubeletProbe" -}}
{{- $probe := deepCopy .probe -}}
{{- if and (include "synthetic-sla-probe.webConfigOn" .root) (hasKey $probe "httpGet") -}}
{{- $_ := set $probe.httpGet "port" "health" -}}
{{- $_ := unset $probe.httpGet "scheme" -}}
{{- end -}}
{{- toYaml $probe -}}
{{- end -}}

{{/*
The health port of a pod serving the endpoints, with a web config on: its container
port (.ports: "true") or its variable (metrics.health_port, from the environment so
that an existingConfig gets it too). Empty without a web config.
*/}}
{{- define "synthetic-sla-probe.healthPort" -}}
{{- $root := .root -}}
{{- if include "synthetic-sla-probe.webConfigOn" $root -}}
{{- $port := int $root.Values.webConfig.healthPort -}}
{{- if eq $port (int $root.Values.service.port) -}}
{{- fail (printf "webConfig.healthPort: must differ from service.port (%d), the metrics port" $port) -}}
{{- end -}}
{{- if .ports }}
- name: health
  containerPort: {{ $port }}
  protocol: TCP
{{- else }}
- name: SLA_PROBE_HEALTH_PORT
  value: {{ $port | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "synthetic-sla-probe.secretVolumeMounts" -}}
{{- range (include "synthetic-sla-probe.secretVolumes" . | fromYamlArray) }}
- name: {{ .name }}
  mountPath: {{ printf "/etc/sla-probe/%s" .name }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The `config` volume: the chart's ConfigMap or Secret, or existingConfig. */}}
{{- define "synthetic-sla-probe.configVolume" -}}
- name: config
  {{- with .Values.existingConfig }}{{ if .name }}
  {{- if eq .kind "Secret" }}
  secret:
    secretName: {{ .name }}
  {{- else }}
  configMap:
    name: {{ .name }}
  {{- end }}
  {{- end }}{{ end }}
  {{- if not .Values.existingConfig.name }}
  {{- if .Values.storeConfigInSecret }}
  secret:
    secretName: {{ include "synthetic-sla-probe.configName" . }}
  {{- else }}
  configMap:
    name: {{ include "synthetic-sla-probe.configName" . }}
  {{- end }}
  {{- end }}
{{- end -}}

{{/*
A duration as the probe reads one (20s, 500ms, 1m30s, 2h, or seconds as a number or
text), in seconds: the rules derive thresholds from config.interval.
*/}}
{{- define "synthetic-sla-probe.seconds" -}}
{{- $text := toString . | trim -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?$" $text -}}
{{- $text | float64 -}}
{{- else -}}
{{- $units := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ms|s|m|h)" $text -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf ($number | float64) (get $units (trimPrefix $number .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}

{{/*
The probe Deployment's (and the helm test pod's) config file: the producer and the
consumer stage. With Spark on, its sink section is the sink's latency threshold alone:
it names no sink path, so nothing but the sink workload ever runs a query on the live
sink's tables and checkpoint.
*/}}
{{- define "synthetic-sla-probe.configFile" -}}
{{- $out := dict -}}
{{- include "synthetic-sla-probe.baseConfig" (dict "root" . "out" $out) -}}
{{- $config := $out.config -}}
{{- if .Values.spark.enabled -}}
{{- $_ := set $config "sink" (pick $config.sink "latency_threshold") -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "synthetic-sla-probe.configChecksum" -}}
{{- $parts := list .Values.existingConfig .Values.signingKeys.keyRing -}}
{{- if not .Values.existingConfig.name -}}
{{- $parts = list (include "synthetic-sla-probe.configFile" .) .Values.signingKeys.keyRing -}}
{{- end -}}
{{- /* The web config is read at start too (appended only when the chart writes one, so
that other releases' pods keep their checksum). */ -}}
{{- with include "synthetic-sla-probe.webConfigFile" . }}{{ $parts = append $parts . }}{{ end -}}
{{- $parts | toJson | sha256sum -}}
{{- end -}}

{{/* The Spark settings derived from spark.cores and spark.memory; the chart owns them. */}}
{{- define "synthetic-sla-probe.sinkSparkConf" -}}
{{- $cores := int .Values.spark.cores -}}
{{- $conf := dict
  "spark.driver.memory" (printf "%dm" (int .Values.spark.memory.heapMi))
  "spark.default.parallelism" (toString $cores)
  "spark.sql.shuffle.partitions" (toString $cores) -}}
{{- if eq .Values.spark.s3a.connector "packages" -}}
{{- $_ := set $conf "spark.jars.packages" (printf "org.apache.hadoop:hadoop-aws:%s" .Values.spark.s3a.hadoopVersion) -}}
{{- $_ := set $conf "spark.jars.ivy" "/tmp/ivy" -}}
{{- end -}}
{{- toYaml $conf -}}
{{- end -}}

{{/* The sink container's memory request and limit, in MiB. */}}
{{- define "synthetic-sla-probe.sinkMemoryMi" -}}
{{- $memory := .Values.spark.memory -}}
{{- add (int $memory.heapMi) (mul (int .Values.spark.cores) (int $memory.perCoreMi)) (int $memory.overheadMi) -}}
{{- end -}}

{{/* A sink path (or checkpoint) as the sink workload uses it: per release if asked. */}}
{{- define "synthetic-sla-probe.sinkLocation" -}}
{{- if .root.Values.spark.sinkPathPerRelease -}}
{{- printf "%s/%s/%s" (trimSuffix "/" .path) .root.Release.Namespace .root.Release.Name -}}
{{- else -}}
{{- .path -}}
{{- end -}}
{{- end -}}

{{/* A sink section's path and checkpoint set, in place, to where the sink workload uses
     them (sinkLocation): its own config file and reconcile's read the same tables. */}}
{{- define "synthetic-sla-probe.resolveSinkLocations" -}}
{{- range $field := list "path" "checkpoint" -}}
{{- if dig $field "" $.sink -}}
{{- $_ := set $.sink $field (include "synthetic-sla-probe.sinkLocation" (dict "root" $.root "path" (get $.sink $field))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The sink workload's config file (`sla-probe sink`): the shared settings, the sink's
path, the lateness the watermark-skew alert is built from, Spark sized by spark.cores
(master local[N], parallelism, heap) and Spark's own log in the scratch emptyDir so the
container's stderr keeps only the probe's JSON lines.
*/}}
{{- define "synthetic-sla-probe.sinkConfigFile" -}}
{{- $out := dict -}}
{{- include "synthetic-sla-probe.baseConfig" (dict "root" . "out" $out) -}}
{{- $config := $out.config -}}
{{- if not (dig "kafka" "bootstrap_servers" "" $config) -}}
{{- fail "spark.enabled needs config.kafka.bootstrap_servers: the sink reads the canary topic" -}}
{{- end -}}
{{- $sink := $config.sink -}}
{{- if not (dig "path" "" $sink) -}}
{{- fail "spark.enabled needs config.sink.path: where the sink's tables and checkpoint live (e.g. s3a://bucket/sla-sink, or a path on a volume from spark.extraVolumes)" -}}
{{- end -}}
{{- if hasKey $sink "master" -}}
{{- fail "config.sink.master is set by the chart (local[N] from spark.cores): set spark.cores instead" -}}
{{- end -}}
{{- $owned := include "synthetic-sla-probe.sinkSparkConf" . | fromYaml -}}
{{- $sparkConf := dig "spark_conf" (dict) $sink -}}
{{- range $name := keys $owned | sortAlpha -}}
{{- if hasKey $sparkConf $name -}}
{{- fail (printf "config.sink.spark_conf.%s is set by the chart: use spark.cores, spark.memory and spark.s3a" $name) -}}
{{- end -}}
{{- end -}}
{{- /* A local path must be on a volume: the rest of the pod's filesystem is read-only,
     and /tmp is the scratch emptyDir, gone with the pod. */ -}}
{{- $mounts := concat .Values.extraVolumeMounts .Values.spark.extraVolumeMounts -}}
{{- range $field, $location := dict "path" $sink.path "checkpoint" (dig "checkpoint" "" $sink) -}}
{{- if and $location (or (not (contains "://" $location)) (hasPrefix "file:" $location)) -}}
{{- $local := printf "%s/" (trimPrefix "file:" $location | trimPrefix "//") -}}
{{- $mounted := false -}}
{{- range $mounts }}{{ if hasPrefix (printf "%s/" (trimSuffix "/" .mountPath)) $local }}{{ $mounted = true }}{{ end }}{{ end -}}
{{- if not $mounted -}}
{{- fail (printf "config.sink.%s %s is not on a volume mounted for it (the sink's root filesystem is read-only, and /tmp is scratch that goes with the pod): mount one there with spark.extraVolumes and spark.extraVolumeMounts, e.g. a PersistentVolumeClaim" $field $location) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $s3a := false -}}
{{- range list $sink.path (dig "checkpoint" "" $sink) }}{{ if hasPrefix "s3a://" . }}{{ $s3a = true }}{{ end }}{{ end -}}
{{- if and $s3a (not .Values.spark.s3a.connector) -}}
{{- fail "config.sink.path (or checkpoint) is s3a://, which needs Hadoop's S3A connector on Spark's classpath: set spark.s3a.connector=image (an image built with --build-arg S3A=true) or packages (Spark downloads hadoop-aws at start)" -}}
{{- end -}}
{{- include "synthetic-sla-probe.resolveSinkLocations" (dict "root" . "sink" $sink) -}}
{{- $_ := set $sink "master" (printf "local[%d]" (int .Values.spark.cores)) -}}
{{- $_ := set $sink "allowed_lateness" .Values.spark.allowedLatenessSeconds -}}
{{- if not (hasKey $sink "spark_log") -}}
{{- $_ := set $sink "spark_log" "/tmp/spark.log" -}}
{{- end -}}
{{- $_ := set $sink "spark_conf" (mergeOverwrite $sparkConf $owned) -}}
{{- /* `sla-probe sink` runs the sink stage only, whatever `stages` says. */ -}}
{{- $_ := unset $config "stages" -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "synthetic-sla-probe.sinkConfigChecksum" -}}
{{- $parts := list .Values.existingConfig .Values.signingKeys.keyRing -}}
{{- if not .Values.existingConfig.name -}}
{{- $parts = list (include "synthetic-sla-probe.sinkConfigFile" .) .Values.signingKeys.keyRing -}}
{{- end -}}
{{- with include "synthetic-sla-probe.webConfigFile" . }}{{ $parts = append $parts . }}{{ end -}}
{{- $parts | toJson | sha256sum -}}
{{- end -}}

{{/*
Volumes and mounts every pod of the release has: the probe's, the sink's and the helm
test pod's. The sink adds its scratch emptyDir and spark.extraVolumes.
*/}}
{{- define "synthetic-sla-probe.volumes" -}}
{{ include "synthetic-sla-probe.configVolume" . }}
{{- with include "synthetic-sla-probe.secretVolumes" . }}
{{ . }}
{{- end }}
- name: signing-keys
  secret:
    secretName: {{ include "synthetic-sla-probe.keySecretName" . }}
    defaultMode: 0400
    items:
      - key: keys.json
        path: keys.json
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
{{- include "synthetic-sla-probe.secretVolumeMounts" . }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Environment every pod of the release has (each sets SLA_PROBE_CONFIG to its own file);
every flag is also SLA_PROBE_<FLAG>.
*/}}
{{- define "synthetic-sla-probe.env" -}}
- name: SLA_PROBE_SIGNING_KEY_FILE
  value: /etc/sla-probe/keys/keys.json
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

{{/*
The availability and latency SLOs as data: their objectives, the probe's series their SLIs
count, each stage's latency threshold, and the stages that get an SLO of their own. The
one source that _slo-rules.tpl (the chart's rules), sloth-prometheusservicelevel.yaml
(Sloth) and pyrra-servicelevelobjectives.yaml (Pyrra) read, so the three never disagree
on what is measured or promised.

    {{- $defs := include "synthetic-sla-probe.sloDefinitions" . | fromYaml -}}

Availability: canaries delivered over all outcomes (delivered, late, lost,
produce_failed), of counter synthetic_sla_canaries_total; its bad events are every other
outcome. Latency: arrived canaries within the stage's threshold, the histogram's bucket
at that bound over its count; the Spark sink (a micro-batch stage) has a threshold of
its own, and so has the mirror stage (replication latency; slo.latency's
mirrorThresholdSeconds, thresholdSeconds unless set). The probe's metrics put a bucket on each threshold (metrics.latency_threshold,
sink.latency_threshold), so the good events are one bucket. The group stage's offset
commits have a threshold too (slo.groupCommit.thresholdSeconds, the probe's
group.commit_latency_threshold), read the same way off the commit histogram by the
chart's rules only, as is the tiered reads' (alerts.tieredReadsSlow.thresholdSeconds,
the probe's tiered.threshold) off their first-record histogram:
- `le` is that bucket's label as the probe (Python's client) exports it and Prometheus 2
  and 3 store it: "0.5", "5.0". Pyrra needs one exact float there.
- `leMatch` also matches the Go clients' spelling of a whole number ("5"): the chart's
  rules and Sloth read the bucket with it.
*/}}
{{- define "synthetic-sla-probe.sloDefinitions" -}}
{{- $slo := .Values.slo -}}
{{- $thresholds := dict -}}
{{- $mirrorSeconds := $slo.latency.mirrorThresholdSeconds | default $slo.latency.thresholdSeconds -}}
{{- range $name, $seconds := dict "default" $slo.latency.thresholdSeconds "sink" $slo.latency.sinkThresholdSeconds "mirror" $mirrorSeconds "groupCommit" $slo.groupCommit.thresholdSeconds "tiered" $.Values.alerts.tieredReadsSlow.thresholdSeconds -}}
{{- $text := $seconds | toString -}}
{{- $le := $text -}}
{{- if not (regexMatch "[.eE]" $text) -}}
{{- $le = printf "%s.0" $text -}}
{{- end -}}
{{- $_ := set $thresholds $name (dict "seconds" $seconds "le" $le "leMatch" (printf "%s(\\\\.0)?" ($text | replace "." "\\\\."))) -}}
{{- end -}}
{{- /*
The stages with SLOs in Sloth and Pyrra: slo.stages, or those this release runs. The
chart's own rules need no list: they group by the stage label.
*/ -}}
{{- $stages := $slo.stages -}}
{{- if not $stages -}}
{{- $config := .Values.config -}}
{{- if dig "kafka" "bootstrap_servers" "" $config -}}
{{- $given := default (list "consumer") $config.stages -}}
{{- if kindIs "string" $given }}{{ $given = splitList "," $given }}{{ end -}}
{{- range $given }}{{ $stages = append $stages (trim .) }}{{ end -}}
{{- $stages = without $stages "sink" -}}
{{- end -}}
{{- if .Values.spark.enabled -}}
{{- $stages = append $stages "sink" -}}
{{- end -}}
{{- if dig "mqtt" "url" "" $config -}}
{{- $stages = concat $stages (dig "mqtt" "stages" (ternary (list "mqtt" "bridge") (list "mqtt") (hasKey (dig "mqtt" (dict) $config) "bridge")) $config) -}}
{{- end -}}
{{- end -}}
{{- $objectives := list -}}
{{- range $stage := $stages -}}
{{- $threshold := index $thresholds (ternary $stage "default" (has $stage (list "sink" "mirror"))) -}}
{{- $objectives = append $objectives (dict
  "stage" $stage "sli" "availability" "name" (printf "%s-availability" $stage)
  "objective" $slo.availability.objective
  "description" (printf "Canaries delivered (valid and within the freshness deadline) by stage %s, of all its canaries' outcomes: the rest were lost, late or never acknowledged." $stage)
  "total" (printf "synthetic_sla_canaries_total{stage=%q}" $stage)
  "errors" (printf "synthetic_sla_canaries_total{stage=%q,outcome!=\"delivered\"}" $stage)) -}}
{{- $objectives = append $objectives (dict
  "stage" $stage "sli" "latency" "name" (printf "%s-latency" $stage)
  "objective" $slo.latency.objective
  "thresholdSeconds" $threshold.seconds
  "description" (printf "Canaries that arrived at stage %s within %vs of being produced, of all that arrived there." $stage $threshold.seconds)
  "total" (printf "synthetic_sla_e2e_latency_seconds_count{stage=%q}" $stage)
  "good" (printf "synthetic_sla_e2e_latency_seconds_bucket{stage=%q,le=%q}" $stage $threshold.le)
  "goodMatch" (printf "synthetic_sla_e2e_latency_seconds_bucket{stage=%q,le=~\"%s\"}" $stage $threshold.leMatch)) -}}
{{- end -}}
{{- toYaml (dict
  "availabilityObjective" $slo.availability.objective
  "latencyObjective" $slo.latency.objective
  "thresholds" $thresholds
  "stages" $stages
  "objectives" $objectives) -}}
{{- end -}}

{{/*
An objective as the percentage Sloth and Pyrra take (0.999 -> 99.9), rounded so that a
ratio's float error never shows (0.999 x 100 = 99.89999999999999).
*/}}
{{- define "synthetic-sla-probe.percent" -}}
{{- round (mulf . 100) 6 -}}
{{- end -}}

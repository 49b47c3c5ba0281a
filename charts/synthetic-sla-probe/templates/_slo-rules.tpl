{{/*
The SLO recording rules and alerts: the one source of the PrometheusRule, of the rules
ConfigMap, and of the plain rules file charts/prometheus/synthetic-sla-probe.rules.yml
(rendered from this template with the default values by charts/render_rules.py; a test
fails if the committed file differs).

Prometheus' own alert templates ({{ $labels.target }}, {{ $value }}) are written inside
Helm raw strings ({{` ... `}}) so Helm passes them through untouched.

Every SLI is per (target, stage) and sums over probe replicas: all canaries of a target's
stage count towards its SLO, whichever replica sent them.
*/}}
{{- define "synthetic-sla-probe.ruleGroups" -}}
{{- $slo := .Values.slo -}}
{{- $alerts := .Values.alerts -}}
{{- $severity := $alerts.severityLabels -}}
{{- $runbook := $alerts.runbookBaseUrl -}}
{{- $job := include "synthetic-sla-probe.job" . -}}
{{- $threshold := $slo.latency.thresholdSeconds -}}
{{- /*
Prometheus 3 stores classic bucket bounds as floats: le="1" is read as le="1.0", while
le="0.5" stays. Match the threshold with and without a trailing ".0" so the latency SLI
reads the same bucket under Prometheus 2 and 3 and from Go or Python clients.
*/ -}}
{{- $sinkThreshold := $slo.latency.sinkThresholdSeconds -}}
{{- $le := printf "%s(\\\\.0)?" ($threshold | toString | replace "." "\\\\.") -}}
{{- $sinkLe := printf "%s(\\\\.0)?" ($sinkThreshold | toString | replace "." "\\\\.") -}}
{{- $windows := list "5m" "30m" "1h" "2h" "6h" "1d" "3d" -}}
{{- /*
Multi-window multi-burn-rate (SRE workbook, ch. 5): a pair fires when the long window
proves the budget burns at this rate and the short window proves it still does, so an
alert resolves within its short window (5m, 30m, 2h, 6h) after the burn stops; no `for`
is needed on top. 14.4x for 1h spends 2% of a 30-day budget; 6x for 6h spends 5%; 3x
for 1d and 1x for 3d spend 10%.
*/ -}}
{{- $burnAlerts := list
  (dict "severity" "page" "pairs" (list (list "1h" "5m" "14.4") (list "6h" "30m" "6")))
  (dict "severity" "ticket" "pairs" (list (list "1d" "2h" "3") (list "3d" "6h" "1"))) -}}
{{- $slis := list
  (dict
    "name" "availability"
    "alert" "SyntheticSlaAvailabilityBudgetBurn"
    "objective" $slo.availability.objective
    "summary" "canaries are lost, late or not acknowledged fast enough to exhaust the availability error budget"
    "meaning" (printf "of canaries delivered (objective %v); the rest were lost, late or never acknowledged" $slo.availability.objective))
  (dict
    "name" "latency"
    "alert" "SyntheticSlaLatencyBudgetBurn"
    "objective" $slo.latency.objective
    "summary" (printf "canaries slower than the latency threshold (%vs; the Spark sink %vs) exhaust the latency error budget" $threshold $sinkThreshold)
    "meaning" (printf "of arrived canaries within %vs, or %vs in the Spark sink stage (objective %v)" $threshold $sinkThreshold $slo.latency.objective)) -}}
groups:
  - name: synthetic-sla-probe.sli
    rules:
      # The objectives as series, so dashboards compute error budgets without copies.
      - record: synthetic_sla:objective:ratio
        expr: vector({{ $slo.availability.objective }})
        labels:
          sli: availability
      - record: synthetic_sla:objective:ratio
        expr: vector({{ $slo.latency.objective }})
        labels:
          sli: latency
          threshold_seconds: {{ $threshold | toString | quote }}
          sink_threshold_seconds: {{ $sinkThreshold | toString | quote }}
      # Availability: delivered canaries over all outcomes (delivered, late, lost,
      # produce_failed). Latency: arrived canaries at or under the stage's threshold,
      # read off its histogram bucket, over all arrived canaries. The Spark sink is a
      # micro-batch stage with a threshold of its own: both buckets exist only where
      # the probe runs that stage, so each stage's series comes from one side of `or`.
      {{- range $window := $windows }}
      - record: target_stage:synthetic_sla_availability:ratio_rate{{ $window }}
        expr: |-
          sum by (target, stage) (rate(synthetic_sla_canaries_total{outcome="delivered"}[{{ $window }}]))
          /
          sum by (target, stage) (rate(synthetic_sla_canaries_total[{{ $window }}]))
      - record: target_stage:synthetic_sla_latency:ratio_rate{{ $window }}
        expr: |-
          (
            sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_bucket{stage!="sink",le=~"{{ $le }}"}[{{ $window }}]))
            or
            sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_bucket{stage="sink",le=~"{{ $sinkLe }}"}[{{ $window }}]))
          )
          /
          sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_count[{{ $window }}]))
      {{- end }}
  - name: synthetic-sla-probe.slo-alerts
    rules:
      {{- range $sli := $slis }}
      {{- range $burn := $burnAlerts }}
      - alert: {{ $sli.alert }}
        # The value is the burn rate over the long window of the first pair that fires:
        # how many times faster than sustainable the error budget is being spent.
        expr: |-
          {{- range $i, $pair := $burn.pairs }}
          {{- if $i }}
          or
          {{- end }}
          (
            (1 - target_stage:synthetic_sla_{{ $sli.name }}:ratio_rate{{ index $pair 0 }}) / (1 - {{ $sli.objective }}) > {{ index $pair 2 }}
            and
            (1 - target_stage:synthetic_sla_{{ $sli.name }}:ratio_rate{{ index $pair 1 }}) / (1 - {{ $sli.objective }}) > {{ index $pair 2 }}
          )
          {{- end }}
        labels:
          severity: {{ index $severity $burn.severity }}
          slo: {{ $sli.name }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "%s%s" `{{ $labels.target }}/{{ $labels.stage }}: ` $sli.summary | quote }}
          description: {{ printf "Stage {{ $labels.stage }} of target {{ $labels.target }} spends its %s error budget {{ $value | humanize }}x faster than sustainable (windows %s). The SLI is the share %s." $sli.name (include "synthetic-sla-probe.pairsText" $burn.pairs) $sli.meaning | quote }}
          runbook_url: {{ printf "%s#%s" $runbook (lower $sli.alert) }}
      {{- end }}
      {{- end }}
  - name: synthetic-sla-probe.alerts
    rules:
      {{- with $alerts.partitionSilent }}
      {{- if .enabled }}
      {{- $silentAfter := maxf 60 (mulf 3 $.Values.config.interval) }}
      # Staleness is computed at scrape time and keeps rising while a partition is
      # silent. A healthy partition peaks at one interval plus the latency; the
      # threshold is three missed rounds, and never under a minute.
      - alert: SyntheticSlaPartitionSilent
        expr: max by (target, stage, partition) (synthetic_sla_partition_staleness_seconds) > {{ $silentAfter }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}/{{ $labels.stage }}: no canary from partition {{ $labels.partition }} for {{ $value | humanizeDuration }}` | quote }}
          description: {{ printf "The freshest canary stage {{ $labels.stage }} has seen on partition {{ $labels.partition }} of target {{ $labels.target }} was produced {{ $value | humanizeDuration }} ago (threshold %vs: max(60s, 3 x the %vs interval)). Records on this partition are not getting through to this stage, and event time downstream stops advancing on it." $silentAfter $.Values.config.interval | quote }}
          runbook_url: {{ printf "%s#syntheticslapartitionsilent" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.watermarkSkew }}
      {{- if .enabled }}
      {{- $skewAbove := mulf 2 $.Values.spark.allowedLatenessSeconds }}
      # A healthy sink's watermark trails now by the allowed lateness plus about one
      # interval; twice the allowed lateness means event time has stopped advancing.
      - alert: SyntheticSlaWatermarkSkew
        expr: max by (target) (synthetic_sla_watermark_skew_seconds) > {{ $skewAbove }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: the Spark sink's event-time watermark is {{ $value | humanizeDuration }} behind` | quote }}
          description: {{ printf "The Spark sink stage of target {{ $labels.target }} has a watermark {{ $value | humanizeDuration }} behind now, more than twice the allowed lateness of %vs. Event-time windows do not close and state grows. A silent partition on the same target inhibits this alert: fix that first." $.Values.spark.allowedLatenessSeconds | quote }}
          runbook_url: {{ printf "%s#syntheticslawatermarkskew" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.invalidCanaries }}
      {{- if .enabled }}
      - alert: SyntheticSlaInvalidCanaries
        expr: sum by (target, stage, reason) (increase(synthetic_sla_invalid_total[{{ .window }}])) > 0
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: {{ $value | humanize }} invalid records ({{ $labels.reason }}) on the canary topic in %s" .window | quote }}
          description: {{ printf "Stage {{ $labels.stage }} of target {{ $labels.target }} read records on the canary topic that are not valid canaries, reason {{ $labels.reason }}, in the last %s. bad_signature means a record changed after it was signed (corruption or tampering); unknown_key a record in this probe's name signed with a key its ring does not hold (a key dropped too early, or forgery); malformed, oversized or unsupported_version something else writing to the topic." .window | quote }}
          runbook_url: {{ printf "%s#syntheticslainvalidcanaries" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.duplicatesOrReordering }}
      {{- if .enabled }}
      {{- $window := .window }}
      {{- $anomalySeverity := index $severity .severity }}
      {{- range $anomaly := list "duplicate" "out_of_order" }}
      - alert: SyntheticSlaDuplicatesOrReordering
        expr: sum by (target, stage) (increase(synthetic_sla_{{ ternary "duplicates" "out_of_order" (eq $anomaly "duplicate") }}_total[{{ $window }}])) > 0
        labels:
          severity: {{ $anomalySeverity }}
          anomaly: {{ $anomaly }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: {{ $value | humanize }} %s canaries in %s" (ternary "duplicated" "reordered" (eq $anomaly "duplicate")) $window | quote }}
          description: {{ printf "Stage {{ $labels.stage }} of target {{ $labels.target }} saw canaries %s in the last %s. %s" (ternary "arrive more than once" "arrive after a later canary of the same partition" (eq $anomaly "duplicate")) $window (ternary "The pipeline is at-least-once somewhere: producer retries without idempotence, a consumer replay, or a sink rewriting a batch." "Records are reordered within a partition: a retried produce without idempotence, or a stage that does not keep partition order." (eq $anomaly "duplicate")) | quote }}
          runbook_url: {{ printf "%s#syntheticsladuplicatesorreordering" $runbook }}
      {{- end }}
      {{- end }}
      {{- end }}
      {{- with $alerts.targetNotReady }}
      {{- if .enabled }}
      # While the probe cannot connect it sends no canaries, so no outcome is counted and
      # the SLO burn alerts are blind: this alert covers that case.
      - alert: SyntheticSlaTargetNotReady
        expr: min by (target) (synthetic_sla_target_ready) == 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: a probe cannot reach the target` | quote }}
          description: {{ printf "A probe of target {{ $labels.target }} has reported not ready for %s: the brokers are unreachable, refuse it, or the canary topic does not exist. While it cannot connect it sends no canaries, so the SLO burn alerts cannot see this." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslatargetnotready" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.probeDown }}
      {{- if .enabled }}
      - alert: SyntheticSlaProbeDown
        expr: up{job={{ $job | quote }}} == 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `Synthetic SLA probe {{ $labels.instance }} cannot be scraped` | quote }}
          description: {{ printf "Prometheus has failed to scrape the probe at {{ $labels.instance }} (job {{ $labels.job }}) for %s. The SLOs it measures are blind: no burn alert can fire for its target." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslaprobedown" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.probeAbsent }}
      {{- if .enabled }}
      - alert: SyntheticSlaProbeAbsent
        expr: absent(up{job={{ $job | quote }}})
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "No synthetic SLA probe is scraped (job %s)" $job | quote }}
          description: {{ printf "Prometheus has had no target in job %s for %s: the probe is not deployed, scaled to zero, or not discovered (ServiceMonitor not selected, scrape config missing). No SLO is measured." $job .for | quote }}
          runbook_url: {{ printf "%s#syntheticslaprobeabsent" $runbook }}
      {{- end }}
      {{- end }}
{{- /*
Reconciliation (`sla-probe reconcile --every`, the chart's reconcile values): whether the
topic's records reached their table, by count and checksum. Rendered whatever
reconcile.enabled says: without the series, these rules are silent.
*/}}
{{- $reconcile := .Values.reconcile }}
  - name: synthetic-sla-reconciliation
    rules:
      # The last run's discrepancies over the records it judged, worst instance per
      # target: the `reconciliation_mismatch_ratio` of the integrity loop.
      - record: target:synthetic_sla_reconciliation_mismatch:ratio
        expr: max by (target) (synthetic_sla_reconciliation_mismatch_ratio)
      # The same over every run of the last hour, from the counters (for dashboards).
      - record: target:synthetic_sla_reconciliation_mismatch:ratio_rate1h
        expr: |
          sum by (target) (increase(synthetic_sla_reconciliation_records_total{result=~"missing|extra|duplicated|checksum_mismatch"}[1h]))
          /
          sum by (target) (increase(synthetic_sla_reconciliation_records_total{result!="unverifiable"}[1h]))
      {{- with $reconcile.alerts.mismatch }}
      {{- if .enabled }}
      # Persistent: every run for `for` found the same records wrong. A record in
      # flight is never counted (the settle delay), so this is data that did not arrive.
      - alert: SyntheticSlaReconciliationMismatch
        expr: target:synthetic_sla_reconciliation_mismatch:ratio > {{ .threshold }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: records of the topic are missing from, or wrong in, their table` | quote }}
          description: {{ printf "Reconciliation of target {{ $labels.target }} has found records missing, extra, duplicated or with another checksum in every run for %s ({{ $value | humanizePercentage }} of the records it judged, threshold %v). The report (`sla-probe reconcile --json`, or the report table) names the partition, window and offsets." .for .threshold | quote }}
          runbook_url: {{ printf "%s#syntheticslareconciliationmismatch" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $reconcile.alerts.stale }}
      {{- if .enabled }}
      {{- $staleAfter := mul .runs $reconcile.everySeconds }}
      # No run completed for `runs` periods: the integrity check itself is down, and
      # the mismatch alert cannot fire. 0 (never) counts as stale.
      - alert: SyntheticSlaReconciliationStale
        expr: time() - max by (target) (synthetic_sla_reconciliation_last_success_timestamp_seconds) > {{ $staleAfter }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: no reconciliation has completed for {{ $value | humanizeDuration }}` | quote }}
          description: {{ printf "No reconciliation run of target {{ $labels.target }} has completed for more than %d runs (%ds at one run every %ds): the brokers or the table cannot be read, or its Spark jobs fail. Until one completes, missing records go unnoticed." (int .runs) (int $staleAfter) (int $reconcile.everySeconds) | quote }}
          runbook_url: {{ printf "%s#syntheticslareconciliationstale" $runbook }}
      {{- end }}
      {{- end }}
{{- end -}}

{{/* "1h and 5m at 14.4x, or 6h and 30m at 6x" */}}
{{- define "synthetic-sla-probe.pairsText" -}}
{{- $parts := list -}}
{{- range . -}}
{{- $parts = append $parts (printf "%s and %s at %sx" (index . 0) (index . 1) (index . 2)) -}}
{{- end -}}
{{- join ", or " $parts -}}
{{- end -}}

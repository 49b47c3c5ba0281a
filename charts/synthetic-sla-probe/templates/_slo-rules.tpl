{{/*
The SLO recording rules and alerts: the one source of the PrometheusRule, of the rules
ConfigMap, and of the plain rules file charts/prometheus/synthetic-sla-probe.rules.yml
(rendered from this template with the default values by charts/render_rules.py; a test
fails if the committed file differs).

Prometheus' own alert templates ({{ $labels.target }}, {{ $value }}) are written inside
Helm raw strings ({{` ... `}}) so Helm passes them through untouched.

Every SLI is per (target, stage) and sums over probe replicas: all canaries of a target's
stage count towards its SLO, whichever replica sent them. The Spark sink's watermark-skew
SLI is per target: only the sink stage has a watermark. So is the group stage's
commit-latency SLI: only that stage commits offsets. The group stage's canaries are a
stage like any other (stage="group") in the availability and latency SLIs.
*/}}
{{- define "synthetic-sla-probe.ruleGroups" -}}
{{- $slo := .Values.slo -}}
{{- $alerts := .Values.alerts -}}
{{- $severity := $alerts.severityLabels -}}
{{- $runbook := $alerts.runbookBaseUrl -}}
{{- $job := include "synthetic-sla-probe.job" . -}}
{{- /*
Which targets these rules cover (ruleScope). "release": the targets of this release's
probes, every raw series selected by its `target` label ($in for a bare selector, $and
before other matchers), so that each release's rules carry its own objectives and two
releases on one Prometheus neither clash nor alert twice. "all": every target the
Prometheus scrapes, one rule set per Prometheus (the plain rules file).
*/ -}}
{{- $in := "" -}}
{{- $and := "" -}}
{{- if eq .Values.ruleScope "release" -}}
{{- $pattern := include "synthetic-sla-probe.targetPattern" . -}}
{{- $in = printf "{target=~%q}" $pattern -}}
{{- $and = printf "target=~%q," $pattern -}}
{{- end -}}
{{- /*
The objectives, thresholds and latency buckets come from the SLO definitions that Sloth's
and Pyrra's SLOs read too (_slo-definitions.tpl). Prometheus 3 stores classic bucket
bounds as floats: le="1" is read as le="1.0", while le="0.5" stays. The bucket is matched
with and without a trailing ".0" (leMatch) so the latency SLI reads the same bucket
under Prometheus 2 and 3 and from Go or Python clients.
*/ -}}
{{- $defs := include "synthetic-sla-probe.sloDefinitions" . | fromYaml -}}
{{- $threshold := $defs.thresholds.default.seconds -}}
{{- $sinkThreshold := $defs.thresholds.sink.seconds -}}
{{- /* The mirror stage's threshold is said only where it differs from the default. */ -}}
{{- $mirrorSays := "" -}}
{{- $mirrorMeans := "" -}}
{{- if ne (toString $defs.thresholds.mirror.seconds) (toString $threshold) -}}
{{- $mirrorSays = printf "; the mirror %vs" $defs.thresholds.mirror.seconds -}}
{{- $mirrorMeans = printf ", %vs in the mirror stage" $defs.thresholds.mirror.seconds -}}
{{- end -}}
{{- $le := $defs.thresholds.default.leMatch -}}
{{- $sinkLe := $defs.thresholds.sink.leMatch -}}
{{- $mirrorLe := $defs.thresholds.mirror.leMatch -}}
{{- $commitThreshold := $defs.thresholds.groupCommit.seconds -}}
{{- $commitLe := $defs.thresholds.groupCommit.leMatch -}}
{{- $tieredLe := $defs.thresholds.tiered.leMatch -}}
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
{{- /*
The skew threshold is the probe's (sink.skew_threshold, by default twice the allowed
lateness): the probe counts the seconds under it, so the rules never need the number;
it is named here for the alert's text only.
*/ -}}
{{- $allowedLateness := $.Values.spark.allowedLatenessSeconds -}}
{{- $skewThreshold := printf "%vs, twice the allowed lateness of %vs" (mulf 2 $allowedLateness) $allowedLateness -}}
{{- with dig "sink" "skew_threshold" "" $.Values.config -}}
{{- $skewThreshold = printf "%v, config.sink.skew_threshold" . -}}
{{- end -}}
{{- $stageSubject := dict "record" "target_stage" "prefix" `{{ $labels.target }}/{{ $labels.stage }}: ` "subject" "Stage {{ $labels.stage }} of target {{ $labels.target }}" -}}
{{- $slis := list
  (merge (dict
    "name" "availability"
    "budget" "availability"
    "alert" "SyntheticSlaAvailabilityBudgetBurn"
    "objective" $defs.availabilityObjective
    "summary" "canaries are lost, late or not acknowledged fast enough to exhaust the availability error budget"
    "meaning" (printf "of canaries delivered (objective %v); the rest were lost, late or never acknowledged" $defs.availabilityObjective)) $stageSubject)
  (merge (dict
    "name" "latency"
    "budget" "latency"
    "alert" "SyntheticSlaLatencyBudgetBurn"
    "objective" $defs.latencyObjective
    "summary" (printf "canaries slower than the latency threshold (%vs; the Spark sink %vs%s) exhaust the latency error budget" $threshold $sinkThreshold $mirrorSays)
    "meaning" (printf "of arrived canaries within %vs, or %vs in the Spark sink stage%s (objective %v)" $threshold $sinkThreshold $mirrorMeans $defs.latencyObjective)) $stageSubject)
  (dict
    "name" "watermark_skew"
    "budget" "watermark-skew"
    "alert" "SyntheticSlaWatermarkSkewBudgetBurn"
    "objective" $slo.sink.skewObjective
    "record" "target"
    "prefix" `{{ $labels.target }}/sink: `
    "subject" "The Spark sink of target {{ $labels.target }}"
    "summary" "the event-time watermark lags the clock by more than the skew threshold often enough to exhaust the watermark-skew error budget"
    "meaning" (printf "of time its event-time watermark lagged the clock by less than the probe's skew threshold (%s; objective %v). The probe counts these seconds at every scrape, so a stalled or stopped query burns the budget with no record arriving. A silent partition on the same target inhibits this alert: it is the cause, fix it first" $skewThreshold $slo.sink.skewObjective))
  (dict
    "name" "group_commit_latency"
    "budget" "group-commit"
    "alert" "SyntheticSlaGroupCommitLatencyBudgetBurn"
    "objective" $slo.groupCommit.objective
    "record" "target_stage"
    "prefix" `{{ $labels.target }}/{{ $labels.stage }}: `
    "subject" "The consumer-group member (stage {{ $labels.stage }}) of target {{ $labels.target }}"
    "summary" (printf "offset commits slower than %vs, or failing, exhaust the group-commit error budget" $commitThreshold)
    "meaning" (printf "of its offset commits the group coordinator acknowledged within %vs, of all it attempted: a failed commit (timeout, coordinator_moved, rebalance, not_authorized, error) counts as a bad one (objective %v). Every consumer group on the cluster commits through the same coordinators and __consumer_offsets partitions: their offsets are not being saved in time either, and a consumer that restarts or loses its partitions reads again from its last commit" $commitThreshold $slo.groupCommit.objective)) -}}
groups:
  - name: synthetic-sla-probe.sli
    rules:
      # The objectives as series, so dashboards compute error budgets without copies:
      # one per target these rules cover (each target whose probes export canaries),
      # so releases with objectives of their own each record their targets' and none
      # clash.
      - record: synthetic_sla:objective:ratio
        expr: {{ $defs.availabilityObjective }} + 0 * group by (target) (synthetic_sla_canaries_total{{ $in }})
        labels:
          sli: availability
      - record: synthetic_sla:objective:ratio
        expr: {{ $defs.latencyObjective }} + 0 * group by (target) (synthetic_sla_canaries_total{{ $in }})
        labels:
          sli: latency
          threshold_seconds: {{ $threshold | toString | quote }}
          sink_threshold_seconds: {{ $sinkThreshold | toString | quote }}
      - record: synthetic_sla:objective:ratio
        expr: {{ $slo.sink.skewObjective }} + 0 * group by (target) (synthetic_sla_canaries_total{{ $in }})
        labels:
          sli: watermark_skew
      - record: synthetic_sla:objective:ratio
        expr: {{ $slo.groupCommit.objective }} + 0 * group by (target) (synthetic_sla_canaries_total{{ $in }})
        labels:
          sli: group_commit_latency
          threshold_seconds: {{ $commitThreshold | toString | quote }}
      # Availability: delivered canaries over all outcomes (delivered, late, lost,
      # produce_failed). Latency: arrived canaries at or under the stage's threshold,
      # read off its histogram bucket, over all arrived canaries. The Spark sink is a
      # micro-batch stage with a threshold of its own, and the mirror stage has one
      # (replication latency): each stage's series comes from one side of `or`.
      {{- range $window := $windows }}
      - record: target_stage:synthetic_sla_availability:ratio_rate{{ $window }}
        expr: |-
          sum by (target, stage) (rate(synthetic_sla_canaries_total{ {{- $and }}outcome="delivered"}[{{ $window }}]))
          /
          sum by (target, stage) (rate(synthetic_sla_canaries_total{{ $in }}[{{ $window }}]))
      - record: target_stage:synthetic_sla_latency:ratio_rate{{ $window }}
        expr: |-
          (
            sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_bucket{ {{- $and }}stage!~"sink|mirror",le=~"{{ $le }}"}[{{ $window }}]))
            or
            sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_bucket{ {{- $and }}stage="sink",le=~"{{ $sinkLe }}"}[{{ $window }}]))
            or
            sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_bucket{ {{- $and }}stage="mirror",le=~"{{ $mirrorLe }}"}[{{ $window }}]))
          )
          /
          sum by (target, stage) (rate(synthetic_sla_e2e_latency_seconds_count{{ $in }}[{{ $window }}]))
      {{- end }}
      # Watermark skew: seconds the Spark sink's watermark lagged the clock by less
      # than the probe's sink.skew_threshold, over all seconds observed. The probe
      # advances both counters at every scrape and progress event, computed from the
      # clock, so a stalled or stopped query keeps adding bad seconds while no record
      # arrives.
      {{- range $window := $windows }}
      - record: target:synthetic_sla_watermark_skew:ratio_rate{{ $window }}
        expr: |-
          sum by (target) (rate(synthetic_sla_watermark_skew_good_seconds_total{{ $in }}[{{ $window }}]))
          /
          sum by (target) (rate(synthetic_sla_watermark_skew_observed_seconds_total{{ $in }}[{{ $window }}]))
      {{- end }}
      # Group commits: each group stage's offset commits (stage group: the classic
      # protocol's member; group_consumer: the consumer protocol's) acknowledged within
      # the threshold (the commit histogram's bucket on it; the histogram holds
      # successful commits only) over every commit attempted, the failed ones added. A
      # failed commit is a bad one whatever its reason. The probe declares every series
      # at zero, so a member that only fails has an SLI of 0, not none.
      {{- range $window := $windows }}
      - record: target_stage:synthetic_sla_group_commit_latency:ratio_rate{{ $window }}
        expr: |-
          sum by (target, stage) (rate(synthetic_sla_group_commit_latency_seconds_bucket{ {{- $and }}le=~"{{ $commitLe }}"}[{{ $window }}]))
          /
          (
            sum by (target, stage) (rate(synthetic_sla_group_commit_latency_seconds_count{{ $in }}[{{ $window }}]))
            +
            sum by (target, stage) (rate(synthetic_sla_group_commit_failures_total{{ $in }}[{{ $window }}]))
          )
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
            (1 - {{ $sli.record }}:synthetic_sla_{{ $sli.name }}:ratio_rate{{ index $pair 0 }}{{ $in }}) / (1 - {{ $sli.objective }}) > {{ index $pair 2 }}
            and
            (1 - {{ $sli.record }}:synthetic_sla_{{ $sli.name }}:ratio_rate{{ index $pair 1 }}{{ $in }}) / (1 - {{ $sli.objective }}) > {{ index $pair 2 }}
          )
          {{- end }}
        labels:
          severity: {{ index $severity $burn.severity }}
          slo: {{ $sli.name }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "%s%s" $sli.prefix $sli.summary | quote }}
          description: {{ printf "%s spends its %s error budget {{ $value | humanize }}x faster than sustainable (windows %s). The SLI is the share %s." $sli.subject $sli.budget (include "synthetic-sla-probe.pairsText" $burn.pairs) $sli.meaning | quote }}
          runbook_url: {{ printf "%s#%s" $runbook (lower $sli.alert) }}
      {{- end }}
      {{- end }}
  - name: synthetic-sla-probe.alerts
    rules:
      {{- with $alerts.partitionSilent }}
      {{- if .enabled }}
      {{- $interval := include "synthetic-sla-probe.seconds" $.Values.config.interval | float64 }}
      {{- $silentAfter := maxf 60 (mulf 3 $interval) }}
      # Staleness is computed at scrape time and keeps rising while a partition is
      # silent. A healthy partition peaks at one interval plus the latency; the
      # threshold is three missed rounds, and never under a minute.
      - alert: SyntheticSlaPartitionSilent
        expr: max by (target, stage, partition) (synthetic_sla_partition_staleness_seconds{{ $in }}) > {{ $silentAfter }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}/{{ $labels.stage }}: no canary from partition {{ $labels.partition }} for {{ $value | humanizeDuration }}` | quote }}
          description: {{ printf "The freshest canary stage {{ $labels.stage }} has seen on partition {{ $labels.partition }} of target {{ $labels.target }} was produced {{ $value | humanizeDuration }} ago (threshold %vs: max(60s, 3 x the %vs interval)). Records on this partition are not getting through to this stage, and event time downstream stops advancing on it." $silentAfter $interval | quote }}
          runbook_url: {{ printf "%s#syntheticslapartitionsilent" $runbook }}
      {{- end }}
      {{- end }}
      {{- /*
The Spark sink query's categorical gates (seed 001): they name the mechanism the
watermark-skew SLO cannot. Each is per target, like the series they read.
*/ -}}
      {{- with $alerts.sinkQueryDown }}
      {{- if .enabled }}
      # Given up: the restart strategy hit its failure-rate cap and nothing restarts the
      # query until the probe restarts. The gauge is latched, so it needs no `for`.
      - alert: SyntheticSlaSinkQueryDown
        expr: max by (target) (synthetic_sla_spark_query_failed{{ $in }}) == 1
        labels:
          severity: {{ index $severity .severity }}
          state: given_up
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: the Spark sink query was given up after repeated failures` | quote }}
          description: {{ `The probe's restart strategy for the Spark sink query of target {{ $labels.target }} hit its failure-rate cap and stopped restarting it. The sink stage judges nothing until the probe restarts: its availability and latency SLIs have no data, and the watermark-skew budget burns. The probe stays up and reports not ready.` | quote }}
          runbook_url: {{ printf "%s#syntheticslasinkquerydown" $runbook }}
      # Down (stopped, restarting, or failing to start) for longer than a restart with
      # its backoff and a cold first batch take.
      - alert: SyntheticSlaSinkQueryDown
        expr: |-
          (min by (target) (synthetic_sla_spark_query_up{{ $in }}) == 0)
          unless
          (max by (target) (synthetic_sla_spark_query_failed{{ $in }}) == 1)
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          state: down
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the Spark sink query has been down for %s" .for | quote }}
          description: {{ printf "The Spark sink query of target {{ $labels.target }} has not been running for %s: it stopped and is waiting to restart, or its start attempts fail. While it is down the sink stage judges nothing and the watermark-skew budget burns. synthetic_sla_spark_query_restarts_total says why it went down (reason)." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslasinkquerydown" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.sinkRestartLoop }}
      {{- if .enabled }}
      # A count over a window holds the alert for that window: a `for` on top would only
      # fire it late, or after the loop had ended.
      - alert: SyntheticSlaSinkRestartLoop
        expr: sum by (target) (increase(synthetic_sla_spark_query_restarts_total{{ $in }}[{{ .window }}])) >= {{ .restarts }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the Spark sink query restarted {{ printf \"%%.0f\" $value }} times in %s" .window | quote }}
          description: {{ printf "The Spark sink query of target {{ $labels.target }} restarted {{ printf \"%%.0f\" $value }} times in the last %s (threshold %v): it keeps failing and the restart strategy keeps bringing it back, and every restart is a gap in the sink stage. synthetic_sla_spark_query_restarts_total by reason (checkpoint, source, batch, stopped, start) says why. If the failures go on, the strategy gives up and SyntheticSlaSinkQueryDown pages." .window .restarts | quote }}
          runbook_url: {{ printf "%s#syntheticslasinkrestartloop" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.sinkCheckpointFailing }}
      {{- if .enabled }}
      # Checkpoint health, failures: the query died writing or reading its checkpoint
      # (offset log, commit log, state). Held for the window, like the restart loop.
      - alert: SyntheticSlaSinkCheckpointFailing
        expr: sum by (target) (increase(synthetic_sla_spark_query_restarts_total{ {{- $and }}reason="checkpoint"}[{{ .window }}])) > 0
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the Spark sink query failed on its checkpoint in the last %s" .window | quote }}
          description: {{ printf "The Spark sink query of target {{ $labels.target }} died writing or reading its checkpoint (offset log, commit log or state store) in the last %s and was restarted from it. The checkpoint's storage is failing (unreachable, throttling, out of space, no permission) or the checkpoint is damaged; a damaged one fails again on every restart." .window | quote }}
          runbook_url: {{ printf "%s#syntheticslasinkcheckpointfailing" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.sinkCheckpointSlow }}
      {{- if .enabled }}
      {{- $recent := printf "sum by (target) (rate(synthetic_sla_spark_commit_duration_seconds_sum%s[%s]))\n/\nsum by (target) (rate(synthetic_sla_spark_commit_duration_seconds_count%s[%s]))" $in .window $in .window }}
      # Checkpoint health, duration: the mean commit time per micro-batch (offset WAL and
      # commit log) over the recent window against its own mean over the baseline
      # window, with an absolute floor so a fast checkpoint's noise never fires it.
      - alert: SyntheticSlaSinkCheckpointSlow
        expr: |-
          (
            {{- $recent | nindent 12 }}
          )
          > {{ .factor }} * (
            sum by (target) (rate(synthetic_sla_spark_commit_duration_seconds_sum{{ $in }}[{{ .baselineWindow }}]))
            /
            sum by (target) (rate(synthetic_sla_spark_commit_duration_seconds_count{{ $in }}[{{ .baselineWindow }}]))
          )
          and
          (
            {{- $recent | nindent 12 }}
          ) > {{ .floorSeconds }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the Spark sink's checkpoint commits take {{ $value | humanizeDuration }}, over %vx their %s mean" .factor .baselineWindow | quote }}
          description: {{ printf "The Spark sink query of target {{ $labels.target }} took {{ $value | humanizeDuration }} per micro-batch on average over the last %s to write its offset WAL and commit log: more than %vx its own mean over %s, and above the %vs floor, for %s. Every batch waits for its commit, so a slow checkpoint store (object-store throttling, a slow or full volume) delays every canary and ends in a stalled query." .window .factor .baselineWindow .floorSeconds .for | quote }}
          runbook_url: {{ printf "%s#syntheticslasinkcheckpointslow" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.sinkLagGrowing }}
      {{- if .enabled }}
      # Growing, not merely non-zero: higher than five minutes before at every evaluation
      # for the whole `for`. A healthy sink's lag jumps between 0 and a few records and
      # breaks the streak at once; a steady backlog does not grow.
      - alert: SyntheticSlaSinkLagGrowing
        expr: |-
          sum by (target) (synthetic_sla_spark_source_lag_records{{ $in }})
          >
          sum by (target) (synthetic_sla_spark_source_lag_records{{ $in }} offset 5m)
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the Spark sink's source lag has grown for %s, to {{ $value | humanize }} records" .for | quote }}
          description: {{ printf "The Spark sink query of target {{ $labels.target }} has fallen further behind its Kafka source at every evaluation for %s (lag above its value five minutes before), now {{ $value | humanize }} records: it reads slower than the topic grows. Canaries wait longer and longer in Kafka before the sink judges them." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslasinklaggrowing" $runbook }}
      {{- end }}
      {{- end }}
      {{- /*
The group stages' consumer groups: a member of a group of its own, per probe and
stage (group: the classic protocol; group_consumer: the consumer protocol, KIP-848),
living through what every consumer group on the cluster does (its coordinator,
rebalances, commits). Per target and stage, the worst member of the target's probes;
the series exist only where a probe runs the stage. The descriptions ask Prometheus
which broker coordinates the group, which the alert's labels cannot carry.
*/}}
      {{- $coordinator := `{{ range $i, $c := sortByLabel "broker" (query (printf "max by (broker) (synthetic_sla_group_coordinator{target=%q,stage=%q}) == 1" $labels.target $labels.stage)) }}{{ if $i }}, {{ end }}broker {{ $c.Labels.broker }}{{ else }}not known: the member cannot find its coordinator (FindCoordinator fails: __consumer_offsets partitions without a leader, or the brokers unreachable){{ end }}` }}
      {{- with $alerts.groupRebalanceStorm }}
      {{- if .enabled }}
      # A storm: more rebalances in `window` than a restart or a coordinator move makes
      # (each is one or two; the first join counts one). The counter's increase holds
      # for the window, so no `for`.
      - alert: SyntheticSlaGroupRebalanceStorm
        expr: max by (target, stage) (increase(synthetic_sla_group_rebalances_total{{ $in }}[{{ .window }}])) > {{ .rebalances }}
        labels:
          severity: {{ index $severity .severity }}
          state: rebalancing
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: the probe's consumer group rebalanced {{ $value | humanize }} times in %s" .window | quote }}
          description: {{ printf "The member of stage {{ $labels.stage }} of target {{ $labels.target }} went through {{ $value | humanize }} rebalances in the last %s (threshold: more than %v). It is the only member of its group, so nothing but the cluster, or the probe itself missing its heartbeats, makes it rejoin: its coordinator moving or failing over, sessions or heartbeats timing out, commits fenced. Every consumer group on the cluster lives through the same: while a group rebalances, its consumers read nothing. The group's coordinator: %s." .window .rebalances $coordinator | quote }}
          runbook_url: {{ printf "%s#syntheticslagrouprebalancestorm" $runbook }}
      # No assignment, or a rebalance that does not end, for `for`: the group member reads
      # nothing (its first join takes seconds).
      - alert: SyntheticSlaGroupRebalanceStorm
        expr: min by (target, stage) (synthetic_sla_group_stable{{ $in }}) == 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          state: unstable
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: the probe's consumer group has had no stable assignment for %s" .for | quote }}
          description: {{ printf "The member of stage {{ $labels.stage }} of target {{ $labels.target }} has held no assignment, or been in a rebalance that does not end, for %s: it reads nothing, and its canaries are late or lost. It cannot join or sync with its group: the coordinator is unreachable or moving, or __consumer_offsets has partitions without a leader. Consumer groups on the cluster that rebalance now are stuck the same way. The group's coordinator: %s." .for $coordinator | quote }}
          runbook_url: {{ printf "%s#syntheticslagrouprebalancestorm" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.groupCommitFailing }}
      {{- if .enabled }}
      {{- $reasons := printf `{{ range $i, $r := sortByLabel "reason" (query (printf "sum by (reason) (increase(synthetic_sla_group_commit_failures_total{target=%%q,stage=%%q}[%s])) > 0" $labels.target $labels.stage)) }}{{ if $i }}, {{ end }}{{ $r.Labels.reason }} {{ $r.Value | humanize }}{{ end }}` .window }}
      # Failures in every `window` for `for`, summed over reasons: a coordinator move
      # fails a commit or two and is over before `for`; reasons that alternate (a
      # timeout, then the coordinator moved) are still one failure that goes on.
      - alert: SyntheticSlaGroupCommitFailing
        expr: sum by (target, stage) (increase(synthetic_sla_group_commit_failures_total{{ $in }}[{{ .window }}])) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: the probe's consumer group has failed to commit offsets in every %s for %s" .window .for | quote }}
          description: {{ printf "Offset commits of the member of stage {{ $labels.stage }} of target {{ $labels.target }} have failed in every %s for %s ({{ $value | humanize }} in the last %s; by reason: %s). The group coordinator does not store offsets: every consumer group it coordinates may be unable to commit, and its consumers read again from their last commit after a restart or a rebalance. The group's coordinator: %s." .window .for .window $reasons $coordinator | quote }}
          runbook_url: {{ printf "%s#syntheticslagroupcommitfailing" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.invalidCanaries }}
      {{- if .enabled }}
      - alert: SyntheticSlaInvalidCanaries
        expr: sum by (target, stage, reason) (increase(synthetic_sla_invalid_total{{ $in }}[{{ .window }}])) > 0
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
      {{- with $alerts.clockSkew }}
      {{- if .enabled }}
      # A stage in another process than the producer (the Spark sink under spark-submit,
      # on other hosts) times canaries by its own clock. A producer clock ahead makes
      # canaries arrive before they were produced: latency reads 0 and staleness low,
      # a slow pipeline looks fast. Future-dated canaries in every window for `for` are
      # a clock that stays ahead; one clock step (an NTP correction) dates one round's
      # canaries and is over before `for`.
      - alert: SyntheticSlaClockSkew
        expr: sum by (target, stage) (increase(synthetic_sla_future_dated_total{{ $in }}[{{ .window }}])) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: canaries arrive before they were produced, for %s: the producer's clock is ahead" .for | quote }}
          description: {{ printf "Stage {{ $labels.stage }} of target {{ $labels.target }} has seen canaries whose signed produce time is more than 1 s after their arrival by its own clock, in every %s for %s: the producing probe's clock is ahead of this stage's (synthetic_sla_clock_lead_seconds says by about how much). This stage's latencies read 0 and its staleness low by the lead: its latency and silent-partition alerts cannot see slowness that size. A producer clock behind reads as latency instead." .window .for | quote }}
          runbook_url: {{ printf "%s#syntheticslaclockskew" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.duplicatesOrReordering }}
      {{- if .enabled }}
      {{- $window := .window }}
      {{- $anomalySeverity := index $severity .severity }}
      {{- range $anomaly := list "duplicate" "out_of_order" }}
      - alert: SyntheticSlaDuplicatesOrReordering
        expr: sum by (target, stage) (increase(synthetic_sla_{{ ternary "duplicates" "out_of_order" (eq $anomaly "duplicate") }}_total{{ $in }}[{{ $window }}])) > 0
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
      {{- with $alerts.abortedCanaryRead }}
      {{- if .enabled }}
      # The transactional stage reads committed records only: a canary of an aborted
      # round read there is a record Kafka must never have shown it.
      - alert: SyntheticSlaAbortedCanaryRead
        expr: sum by (target, stage) (increase(synthetic_sla_aborted_reads_total{{ $in }}[{{ .window }}])) > 0
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}/{{ $labels.stage }}: {{ $value | humanize }} canaries of aborted transactions read committed in %s" .window | quote }}
          description: {{ printf "Stage {{ $labels.stage }} of target {{ $labels.target }} reads the canary topic read_committed, and read canaries the probe wrote in transactions it then aborted, in the last %s. Every read_committed consumer of the cluster (exactly-once pipelines: Kafka Streams, Flink's and Spark's Kafka sinks) may be reading aborted data as if committed: a correctness failure, not a delay." .window | quote }}
          runbook_url: {{ printf "%s#syntheticslaabortedcanaryread" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.lastStableOffsetPinned }}
      {{- if .enabled }}
      - alert: SyntheticSlaLastStableOffsetPinned
        expr: max by (target, partition) (synthetic_sla_partition_unstable_records{{ $in }}) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: partition {{ $labels.partition }}'s last stable offset has trailed its high watermark for %s" .for | quote }}
          description: {{ printf "Partition {{ $labels.partition }} of the canary topic of target {{ $labels.target }} has had records of an open transaction ({{ $value | humanize }} records between its last stable offset and its high watermark) at every look for %s: a transaction left open, by a producer that hangs or died before it ended it. Every read_committed consumer of the partition waits until it ends or the broker aborts it (transaction.timeout.ms); consumers reading uncommitted records do not." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslalaststableoffsetpinned" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.mirrorHeartbeatStale }}
      {{- if .enabled }}
      - alert: SyntheticSlaMirrorHeartbeatStale
        expr: time() - max by (target) (synthetic_sla_mirror_heartbeat_timestamp_seconds{{ $in }}) > {{ .afterSeconds }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: MirrorMaker 2's newest heartbeat is {{ $value | humanizeDuration }} old` | quote }}
          description: {{ printf "The newest heartbeat MirrorMaker 2 wrote from the source cluster to the cluster the mirror stage of target {{ $labels.target }} reads was stamped {{ $value | humanizeDuration }} ago (threshold %vs; it writes one a second by default). Its worker is down, paused, or cannot write to the target cluster. If the mirror stage pages too, the whole mirror is down; if it does not, the canaries still get through and only the heartbeat connector is failing." .afterSeconds | quote }}
          runbook_url: {{ printf "%s#syntheticslamirrorheartbeatstale" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.tieredReadsFailing }}
      {{- if .enabled }}
      - alert: SyntheticSlaTieredReadsFailing
        expr: |
          sum by (target) (increase(synthetic_sla_tiered_reads_total{ {{- $and }}outcome="failed"}[{{ .window }}]))
            / sum by (target) (increase(synthetic_sla_tiered_reads_total{ {{- $and }}outcome=~"read|failed"}[{{ .window }}]))
            > {{ .ratio }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: {{ $value | humanizePercentage }} of the tiered reads in %s failed" .window | quote }}
          description: {{ printf "The probe of target {{ $labels.target }} reads canaries old enough to have left the brokers' disks (config.tiered.age), which the brokers serve from tiered storage; {{ $value | humanizePercentage }} of those reads in the last %s failed (synthetic_sla_tiered_read_failures_total says why: UNKNOWN_SERVER_ERROR is what a remote storage manager's failure comes back as, timeout a read that got no record in time). Consumers catching up or replaying past the local retention are stuck; the tail of the log is not concerned (the stages say so)." .window | quote }}
          runbook_url: {{ printf "%s#syntheticslatieredreadsfailing" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.tieredReadsSlow }}
      {{- if .enabled }}
      - alert: SyntheticSlaTieredReadsSlow
        expr: |
          1 - sum by (target) (increase(synthetic_sla_tiered_first_record_seconds_bucket{ {{- $and }}le=~"{{ $tieredLe }}"}[{{ .window }}]))
            / sum by (target) (increase(synthetic_sla_tiered_first_record_seconds_count{{ $in }}[{{ .window }}]))
            > {{ .ratio }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: {{ $value | humanizePercentage }} of the tiered reads in %s took over %vs to their first record" .window .thresholdSeconds | quote }}
          description: {{ printf "The tiered reads of target {{ $labels.target }} (canaries served from tiered storage) got their first record later than %vs in {{ $value | humanizePercentage }} of the reads of the last %s. The remote store, or the brokers' remote reader threads, answer slowly: consumers catching up past the local retention fall further behind." .thresholdSeconds .window | quote }}
          runbook_url: {{ printf "%s#syntheticslatieredreadsslow" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.transactionsFailing }}
      {{- if .enabled }}
      - alert: SyntheticSlaTransactionsFailing
        expr: sum by (target) (increase(synthetic_sla_transactions_total{ {{- $and }}outcome="failed"}[{{ .window }}])) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the probe's transactions have failed in every %s for %s" .window .for | quote }}
          description: {{ printf "The transactional stage's producer of target {{ $labels.target }} could not commit (or abort) its transactions in every %s for %s: their canaries never reach a read_committed consumer. The transaction coordinator is unreachable, moving, or refuses the producer (fenced, or no Write on the transactional id). Exactly-once producers of the cluster fail the same way." .window .for | quote }}
          runbook_url: {{ printf "%s#syntheticslatransactionsfailing" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.targetNotReady }}
      {{- if .enabled }}
      # While the probe cannot connect it sends no canaries, so no outcome is counted and
      # the SLO burn alerts are blind: this alert covers that case.
      - alert: SyntheticSlaTargetNotReady
        expr: min by (target) (synthetic_sla_target_ready{{ $in }}) == 0
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
  Scale (issue 14): rules that work whatever metrics.partition_series exports (every
  partition, only the stale ones, or none) and say which broker is burning, or holds
  replicas out of the ISR. Kept in a group of their own.
  */}}
  - name: synthetic-sla-probe.scale
    rules:
      {{- with $alerts.partitionSilent }}
      {{- if .enabled }}
      {{- $interval := include "synthetic-sla-probe.seconds" $.Values.config.interval | float64 }}
      {{- $silentAfter := maxf 60 (mulf 3 $interval) }}
      # The same page from the per-stage aggregate, for a probe that exports no
      # per-partition staleness (metrics.partition_series: none). Where the probe does
      # export it (all; stale, which has a series for every partition past one missed
      # round), the per-partition alert above fires instead and this one stays quiet.
      - alert: SyntheticSlaPartitionSilent
        expr: |-
          max by (target, stage) (synthetic_sla_staleness_max_seconds{{ $in }}) > {{ $silentAfter }}
          unless on (target, stage)
          max by (target, stage) (synthetic_sla_partition_staleness_seconds{{ $in }})
        labels:
          severity: {{ index $severity .severity }}
          # Tells this form from the per-partition one (promtool rejects two rules of
          # one name and the same labels); routing and inhibition match either.
          scope: stage
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}/{{ $labels.stage }}: a partition has had no canary for {{ $value | humanizeDuration }}` | quote }}
          description: {{ printf "The stalest partition of stage {{ $labels.stage }} of target {{ $labels.target }} last had a canary {{ $value | humanizeDuration }} ago (threshold %vs: max(60s, 3 x the %vs interval)); synthetic_sla_stale_partitions says how many are stale. This probe exports no per-partition staleness (metrics.partition_series), so the alert cannot name the partition: the probe's logs do (lost and failed canaries name theirs)." $silentAfter $interval | quote }}
          runbook_url: {{ printf "%s#syntheticslapartitionsilent" $runbook }}
      {{- end }}
      {{- end }}
      # Availability per broker: each canary counts against the broker that led its
      # partition when it was produced, so a bad broker burns its own series.
      {{- range $window := list "5m" "30m" "1h" "6h" }}
      - record: target_stage_broker:synthetic_sla_availability:ratio_rate{{ $window }}
        expr: |-
          sum by (target, stage, broker) (rate(synthetic_sla_broker_canaries_total{ {{- $and }}outcome="delivered"}[{{ $window }}]))
          /
          sum by (target, stage, broker) (rate(synthetic_sla_broker_canaries_total{{ $in }}[{{ $window }}]))
      {{- end }}
      {{- with $alerts.brokerBurn }}
      {{- if .enabled }}
      {{- $objective := $defs.availabilityObjective }}
      # Which broker burns the availability budget: the page pairs of the SLO alert
      # (1h and 5m at 14.4x, 6h and 30m at 6x) on one broker's canaries. It names the
      # broker the availability page does not.
      - alert: SyntheticSlaBrokerAvailabilityBurn
        expr: |-
          (
            (1 - target_stage_broker:synthetic_sla_availability:ratio_rate1h{{ $in }}) / (1 - {{ $objective }}) > 14.4
            and
            (1 - target_stage_broker:synthetic_sla_availability:ratio_rate5m{{ $in }}) / (1 - {{ $objective }}) > 14.4
          )
          or
          (
            (1 - target_stage_broker:synthetic_sla_availability:ratio_rate6h{{ $in }}) / (1 - {{ $objective }}) > 6
            and
            (1 - target_stage_broker:synthetic_sla_availability:ratio_rate30m{{ $in }}) / (1 - {{ $objective }}) > 6
          )
        labels:
          severity: {{ index $severity .severity }}
          slo: availability
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}/{{ $labels.stage }}: canaries led by broker {{ $labels.broker }} burn the availability budget` | quote }}
          description: {{ printf "Canaries whose partition broker {{ $labels.broker }} led when they were produced fail at stage {{ $labels.stage }} of target {{ $labels.target }} fast enough to spend the availability budget {{ $value | humanize }}x faster than sustainable (1h and 5m at 14.4x, or 6h and 30m at 6x; objective %v). Look at that broker first." $objective | quote }}
          runbook_url: {{ printf "%s#syntheticslabrokeravailabilityburn" $runbook }}
      {{- end }}
      {{- end }}
      {{- /*
The canary topic's replica health (seed 002: under-replicated, under min ISR and offline
are the broker signals an on-call looks at first), from the metadata the probe refreshes
every round. The descriptions query Prometheus for what the alert's labels cannot carry:
whether the broker is in the metadata (up), and which brokers are out of sync.
*/}}
      {{- $outOfSyncBrokers := `{{ range $i, $broker := sortByLabel "broker" (query (printf "max by (broker) (synthetic_sla_broker_replicas_out_of_sync{target=%q}) > 0" $labels.target)) }}{{ if $i }}, {{ end }}{{ $broker.Labels.broker }} ({{ $broker.Value | humanize }}){{ else }}none: the partitions have fewer replicas than min.insync.replicas, the topic's settings are at fault{{ end }}` }}
      {{- with $alerts.replicasUnderReplicated }}
      {{- if .enabled }}
      {{- $brokerState := `{{ if query (printf "synthetic_sla_broker_info{target=%q,broker=%q,listed=\"true\"}" $labels.target $labels.broker) }}The cluster metadata lists the broker: it is up, and its replicas do not keep up with their leaders (its disk or network, or the leaders').{{ else }}The cluster metadata no longer lists the broker: it is down or cut off from the cluster.{{ end }}` }}
      # Per broker, so that `for` is how long one broker's replicas stay out of the ISR.
      # A rolling restart takes each broker out for a minute or two in turn, and the
      # next goes as the last rejoins, often between two metadata refreshes: the topic
      # is under-replicated for the whole restart, longer than `for` on a cluster of
      # enough brokers, while no broker is out for as long. Any partition
      # under-replicated has a replica out of sync on some broker, so this fires for
      # every under-replicated partition that stays so, naming the broker.
      - alert: SyntheticSlaReplicasUnderReplicated
        expr: max by (target, broker) (synthetic_sla_broker_replicas_out_of_sync{{ $in }}) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: broker {{ $labels.broker }} has been out of the ISR of {{ $value | humanize }} canary partitions for %s" .for | quote }}
          description: {{ printf "Broker {{ $labels.broker }} holds replicas of {{ $value | humanize }} canary partitions of target {{ $labels.target }} that have not been in sync (in the ISR) for %s, longer than a controlled restart keeps a broker out: those partitions are under-replicated. %s One more failure among their in-sync replicas takes them under min.insync.replicas (acks=all writes refused) or offline." .for $brokerState | quote }}
          runbook_url: {{ printf "%s#syntheticslareplicasunderreplicated" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.replicasUnderMinIsr }}
      {{- if .enabled }}
      {{- $minInsync := `{{ with query (printf "max(synthetic_sla_min_insync_replicas{target=%q})" $labels.target) }}{{ . | first | value | humanize }}{{ end }}` }}
      {{- /* Eligible leader replicas (KIP-966) make up for the ISR where the cluster keeps
      them: said only when they do, for some of the partitions at least. */}}
      {{- $eligible := `{{ with query (printf "max(synthetic_sla_partitions_under_min_isr_with_elr{target=%q})" $labels.target) }}{{ if lt (. | first | value) $value }} Counting the eligible leader replicas (KIP-966), the acknowledged records of only {{ . | first | value | humanize }} of them are on fewer brokers than min.insync.replicas: the others refuse writes yet lose nothing acknowledged, and an eligible replica takes over cleanly if their leader fails.{{ end }}{{ end }}` }}
      # Writes are refused now: a short `for` only passes over a follower that drops out
      # of the ISR and rejoins at once. The availability page fires for the same cause
      # (failed produces, its symptom) and is not inhibited by it, nor it by the page:
      # this ticket is what names the cause (docs/alerting.md).
      - alert: SyntheticSlaReplicasUnderMinIsr
        expr: max by (target) (synthetic_sla_partitions_under_min_isr{{ $in }}) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: {{ $value | humanize }} canary partitions under min.insync.replicas for %s: acks=all writes to them are refused" .for | quote }}
          description: {{ printf "{{ $value | humanize }} canary partitions of target {{ $labels.target }} have had fewer in-sync replicas than the topic's min.insync.replicas (%s) for %s: their leaders refuse every acks=all produce (NOT_ENOUGH_REPLICAS), and the probe's canaries to them fail (produce_failed). This is the cause of the availability burn those failures show.%s Brokers with replicas out of the ISR (canary partitions): %s." $minInsync .for $eligible $outOfSyncBrokers | quote }}
          runbook_url: {{ printf "%s#syntheticslareplicasunderminisr" $runbook }}
      {{- end }}
      {{- end }}
      {{- /*
Blind spots: what the probe cannot see must open a ticket, not stay silent. A broker
that leads no canary partition is not measured (its canaries are other brokers');
without DescribeConfigs the topic's min.insync.replicas is unknown and the under-min-ISR
ticket above can never fire (where it could: a topic of one replica is under min ISR
only when offline, which has signals of its own; an MQTT target has no replication
factor, 0); and a topic of three replicas or more with a min ISR of 1 lets an acks=all
write succeed on one copy. Folded over replicas of the probe with max.
*/}}
      {{- with $alerts.brokerUnmeasured }}
      {{- if .enabled }}
      - alert: SyntheticSlaBrokerUnmeasured
        expr: max by (target) (synthetic_sla_brokers_without_canary_leader{{ $in }}) > 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: {{ $value | humanize }} brokers have led no canary partition for %s: the probe does not measure them" .for | quote }}
          description: {{ printf "{{ $value | humanize }} brokers of target {{ $labels.target }} have led no partition of the canary topic for %s: no canary is written through them, so an outage of theirs shows in no SLO of the probe. With topic management on (kafka.create_topic, kafka.move_leaders) the probe moves leaders itself; it has not, so it lacks Alter on the cluster or the topic has fewer partitions than brokers. Off (strict ACLs), an operator must grow the topic or elect the preferred leaders." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslabrokerunmeasured" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.minInsyncReplicasUnknown }}
      {{- if .enabled }}
      - alert: SyntheticSlaMinInsyncReplicasUnknown
        expr: |-
          max by (target) (synthetic_sla_min_insync_replicas{{ $in }}) == 0
          and on (target)
          max by (target) (synthetic_sla_replication_factor{{ $in }}) > 1
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ printf "{{ $labels.target }}: the canary topic's min.insync.replicas has been unknown for %s: SyntheticSlaReplicasUnderMinIsr cannot fire" .for | quote }}
          description: {{ printf "The probe of target {{ $labels.target }} has not been able to read the canary topic's min.insync.replicas for %s (synthetic_sla_min_insync_replicas 0): the broker refused DescribeConfigs on the topic. Partitions under min ISR, whose acks=all writes are refused, cannot be told apart from any other failed write, and their ticket never fires. Grant DescribeConfigs on the canary topic to the probe's principal." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslamininsyncreplicasunknown" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.minInsyncReplicasLow }}
      {{- if .enabled }}
      - alert: SyntheticSlaMinInsyncReplicasLow
        expr: |-
          max by (target) (synthetic_sla_min_insync_replicas{{ $in }}) == 1
          and on (target)
          max by (target) (synthetic_sla_replication_factor{{ $in }}) >= 3
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ "{{ $labels.target }}: the canary topic has min.insync.replicas 1 with 3 or more replicas: acks=all promises one copy" | quote }}
          description: {{ printf "The canary topic of target {{ $labels.target }} has {{ with query (printf \"max(synthetic_sla_replication_factor{target=%%q})\" $labels.target) }}{{ . | first | value | humanize }}{{ end }} replicas per partition and min.insync.replicas 1 (for %s): an acks=all write is acknowledged once its leader alone has it, and a leader lost before its followers copy it loses the write. Every acks=all producer on topics configured alike gets the same weak promise, and the probe's durability SLO measures less than it says. On KRaft a topic without its own min.insync.replicas takes the controllers' value, not the brokers': set it on the topic or on the controllers (RF - 1, usually 2)." .for | quote }}
          runbook_url: {{ printf "%s#syntheticslamininsyncreplicaslow" $runbook }}
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
        expr: max by (target) (synthetic_sla_reconciliation_mismatch_ratio{{ $in }})
      # The same over every run of the last hour, from the counters (for dashboards).
      - record: target:synthetic_sla_reconciliation_mismatch:ratio_rate1h
        expr: |
          sum by (target) (increase(synthetic_sla_reconciliation_records_total{ {{- $and }}result=~"missing|extra|duplicated|checksum_mismatch"}[1h]))
          /
          sum by (target) (increase(synthetic_sla_reconciliation_records_total{ {{- $and }}result!="unverifiable"}[1h]))
      {{- with $reconcile.alerts.mismatch }}
      {{- if .enabled }}
      # Persistent: every run for `for` found the same records wrong. A record in
      # flight is never counted (the settle delay), so this is data that did not arrive.
      - alert: SyntheticSlaReconciliationMismatch
        expr: target:synthetic_sla_reconciliation_mismatch:ratio{{ $in }} > {{ .threshold }}
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
        expr: time() - max by (target) (synthetic_sla_reconciliation_last_success_timestamp_seconds{{ $in }}) > {{ $staleAfter }}
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
{{- /*
The smoke test (`sla-probe once --push-gateway`: the chart's smokeTest CronJob, or a
deploy pipeline): each run pushes every target's result to a Pushgateway, one group per
(job, instance, target) that the next push replaces, and Prometheus scrapes it with
honor_labels. The instance is the same every run (the target's name unless given; the
CronJob's <release>-smoke), so a run replaces the last one's result wherever it ran: a
failed run's alert resolves with the next passing one, and no past run's group is left
to go stale. Rendered whatever smokeTest.enabled says: a pipeline may push without the
CronJob, and without the series these rules are silent. A Pushgateway that restarts
without persistence forgets every group: neither alert can fire until a run pushes.
*/}}
{{- $smoke := .Values.smokeTest }}
{{- /* Alerts only: with both off, no group (an empty one is no rule group). */}}
{{- if or $alerts.smokeTest.failed.enabled $alerts.smokeTest.stale.enabled }}
  - name: synthetic-sla-smoke
    rules:
      {{- with $alerts.smokeTest.failed }}
      {{- if .enabled }}
      {{- $undelivered := `{{ range $i, $canaries := sortByLabel "outcome" (query (printf "synthetic_sla_smoke_canaries{job=%q,instance=%q,target=%q,outcome!=\"delivered\"} > 0" $labels.job $labels.instance $labels.target)) }}{{ if $i }}, {{ end }}{{ $canaries.Labels.stage }} {{ $canaries.Labels.outcome }} {{ $canaries.Value | humanize }}{{ else }}none, so the run failed on something else: no canary judged at all (the target unreachable, the topic missing), or invalid, duplicated or reordered records; the report says which{{ end }}` }}
      # The gauge is the last run's verdict and stays until the next push replaces it, so
      # the alert lasts until a run passes. `for` lets a re-run that passes at once (a
      # deploy pipeline's retry) open no ticket.
      - alert: SyntheticSlaSmokeTestFailed
        expr: max by (job, instance, target) (synthetic_sla_smoke_success{{ $in }}) == 0
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: the last smoke test failed ({{ $labels.job }}/{{ $labels.instance }})` | quote }}
          description: {{ printf "The last smoke test (`sla-probe once`) of target {{ $labels.target }}, pushed to the group of job {{ $labels.job }} and instance {{ $labels.instance }}, failed, and no run has passed since (for %s): not every canary was delivered within the smoke test's freshness, or the run could not probe the target. A deploy pipeline gated on it should not promote. Canaries not delivered (stage, outcome): %s. The run's report (its output: for the chart's CronJob, the failed Job's log) names the failing partitions and the brokers that led them." .for $undelivered | quote }}
          runbook_url: {{ printf "%s#syntheticslasmoketestfailed" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $alerts.smokeTest.stale }}
      {{- if .enabled }}
      {{- $staleAfter := mul .periods $smoke.periodSeconds }}
      # No run has pushed for `periods` periods: the smoke test itself is down (not
      # scheduled, killed before it pushed, or its pushes fail), and the failed alert
      # cannot fire. The pushed timestamp is when the run ended, so a healthy group
      # peaks at one period plus the run's length.
      - alert: SyntheticSlaSmokeTestStale
        expr: time() - max by (job, instance, target) (synthetic_sla_smoke_last_run_timestamp_seconds{{ $in }}) > {{ $staleAfter }}
        for: {{ .for }}
        labels:
          severity: {{ index $severity .severity }}
          {{- with $alerts.additionalLabels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.target }}: no smoke test has pushed a result for {{ $value | humanizeDuration }} ({{ $labels.job }}/{{ $labels.instance }})` | quote }}
          description: {{ printf "No smoke test of target {{ $labels.target }} has pushed a result to the group of job {{ $labels.job }} and instance {{ $labels.instance }} for more than %d periods (%ds at one run every %ds): the CronJob is suspended or not scheduled, its runs are killed before they end, or their pushes to the Pushgateway fail. The result the Pushgateway still holds is that old; until a run pushes, a failing pipeline goes unnoticed by the smoke test." (int .periods) (int $staleAfter) (int $smoke.periodSeconds) | quote }}
          runbook_url: {{ printf "%s#syntheticslasmoketeststale" $runbook }}
      {{- end }}
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

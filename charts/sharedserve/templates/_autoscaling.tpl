{{/*
A server's autoscaler, on the servers' own metrics: the calls waiting (sharedserve_queue_depth,
a gauge, averaged per pod), or with KEDA the p90 queue wait (sharedserve_queue_wait_seconds). The Deployment then leaves out `replicas`, which the autoscaler
owns (an upgrade would otherwise reset it), and its `replicas` value is the lower bound. One pod
at a time each way, and slowly down: every pod takes a share of a GPU, and a new one loads its
model before it is ready. Argument: (list root server name labels).
*/}}
{{- define "sharedserve.autoscaler" -}}
{{- $root := index . 0 }}{{ $s := index . 1 }}{{ $name := index . 2 }}{{ $labels := index . 3 }}
{{- $a := $root.Values.autoscaling }}
{{- $min := $s.replicas | default 1 | int }}
{{- $max := max $min ($a.maxReplicas | int) }}
{{- $wait := eq $a.metric "sharedserve_queue_wait_seconds" }}
{{- if and $wait (eq $a.kind "hpa") }}
{{- fail "autoscaling: an hpa scales on a per-pod gauge (metric sharedserve_queue_depth); queue wait, a histogram's quantile, needs kind keda" }}
{{- end }}
{{- if eq $a.kind "hpa" }}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ $name }}
  minReplicas: {{ $min }}
  maxReplicas: {{ $max }}
  metrics:
    - type: Pods
      pods:
        metric:
          name: {{ $a.metric }}
        target:
          type: AverageValue
          averageValue: {{ $a.target | toString | quote }}
  behavior:
    scaleUp:
      stabilizationWindowSeconds: 60
      policies:
        - type: Pods
          value: 1
          periodSeconds: 60
    scaleDown:
      stabilizationWindowSeconds: 300
      policies:
        - type: Pods
          value: 1
          periodSeconds: 120
{{- else if eq $a.kind "keda" }}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  scaleTargetRef:
    name: {{ $name }}
  minReplicaCount: {{ $min }}
  maxReplicaCount: {{ $max }}
  pollingInterval: 15
  cooldownPeriod: 300
  triggers:
    {{- $pods := printf "namespace=%q, pod=~%q" $root.Release.Namespace (printf "%s-[a-z0-9]+-[a-z0-9]+" $name) }}
    - type: prometheus
      {{- if $wait }}
      # The server's p90 wait, held at the target: one value for the whole server.
      metricType: Value
      metadata:
        serverAddress: {{ $a.prometheus | quote }}
        query: {{ printf "histogram_quantile(0.9, sum by (le) (rate(sharedserve_queue_wait_seconds_bucket{%s}[2m])))" $pods | quote }}
      {{- else }}
      # The calls waiting, summed over the pods: KEDA holds the average per pod at the target.
      metricType: AverageValue
      metadata:
        serverAddress: {{ $a.prometheus | quote }}
        query: {{ printf "sum(%s{%s})" $a.metric $pods | quote }}
      {{- end }}
        threshold: {{ $a.target | toString | quote }}
{{- end }}
{{- end -}}

{{/*
A server's autoscaler, on its pods' own gauge (autoscaling.metric: sharedserve_queue_depth, the
requests waiting, by default). The Deployment then leaves out `replicas`, which the autoscaler
owns (an upgrade would otherwise reset it), and its `replicas` value is the lower bound. One pod
at a time each way, and slowly down: every pod takes a share of a GPU, and a new one loads its
model before it is ready. Argument: (list root server name labels).
*/}}
{{- define "sharedserve.autoscaler" -}}
{{- $root := index . 0 }}{{ $s := index . 1 }}{{ $name := index . 2 }}{{ $labels := index . 3 }}
{{- $a := $root.Values.autoscaling }}
{{- $min := $s.replicas | default 1 | int }}
{{- $max := max $min ($a.maxReplicas | int) }}
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
    - type: prometheus
      metricType: AverageValue
      metadata:
        serverAddress: {{ $a.prometheus | quote }}
        query: {{ printf "sum(%s{namespace=%q, pod=~%q})" $a.metric $root.Release.Namespace (printf "%s-[a-z0-9]+-[a-z0-9]+" $name) | quote }}
        threshold: {{ $a.target | toString | quote }}
{{- end }}
{{- end -}}

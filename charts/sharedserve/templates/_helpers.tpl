{{/*
The chart's templates write out, in Helm's terms, what `sharedserve k8s render` renders from
sharedserve/k8s/model/ and what kustomize builds from k8s/: tests/integration/k8s/test_chart_drift.py
renders both for the same inputs and compares the objects, so an edit to one that the other lacks
fails there.
*/}}

{{/* A server's Deployment and Service name: its `name`, else the model's, lower-cased. */}}
{{- define "sharedserve.serverName" -}}
{{- .name | default (.model | lower | replace "_" "-" | replace "." "-") -}}
{{- end -}}

{{/* A server's labels; the argument: (list server name). */}}
{{- define "sharedserve.serverLabels" -}}
app.kubernetes.io/name: sharedserve-model
app.kubernetes.io/instance: {{ index . 1 | quote }}
app.kubernetes.io/component: model
app.kubernetes.io/part-of: sharedserve
sharedserve.io/model: {{ (index . 0).model | quote }}
{{- end -}}

{{- define "sharedserve.serverSelector" -}}
app.kubernetes.io/name: sharedserve-model
app.kubernetes.io/instance: {{ . | quote }}
{{- end -}}

{{- define "sharedserve.allocatorLabels" -}}
app.kubernetes.io/name: sharedserve-allocator
app.kubernetes.io/component: allocator
app.kubernetes.io/part-of: sharedserve
{{- end -}}

{{/* The taints of GPU nodes every sharedserve pod tolerates. */}}
{{- define "sharedserve.tolerations" -}}
- key: nvidia.com/gpu
  operator: Exists
  effect: NoSchedule
- key: sharedserve.io/gpu
  operator: Exists
  effect: NoSchedule
{{- end -}}

{{/* The management key: the existing Secret's where there is one (kept across upgrades), else a
new one. Rendered once per release and cached in the root context. */}}
{{- define "sharedserve.adminKey" -}}
{{- if not (hasKey .Values "__adminKey") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace .Values.adminSecret -}}
{{- $key := "" -}}
{{- if and $existing $existing.data (hasKey $existing.data "key") -}}
{{- $key = index $existing.data "key" | b64dec -}}
{{- else -}}
{{- $key = randAlphaNum 64 | lower -}}
{{- end -}}
{{- $_ := set .Values "__adminKey" $key -}}
{{- end -}}
{{- .Values.__adminKey -}}
{{- end -}}

{{- define "sharedserve.serverSecurity" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end -}}

{{/* A shared server's init container script: each model's directory linked into the repository,
its model file copied from the ConfigMap (sharedserve/k8s/shared_server.py). Names and directories
are model names (the schema's pattern): safe unquoted. */}}
{{- define "sharedserve.repositoryScript" -}}
set -eu
{{ range $m := .models -}}
mkdir /repository/{{ $m.name }} && ln -s /models/{{ $m.directory }}/* /repository/{{ $m.name }}/ && rm -f /repository/{{ $m.name }}/sharedserve.yaml && cp /etc/sharedserve/model-files/{{ $m.name }}.yaml /repository/{{ $m.name }}/sharedserve.yaml
{{ end -}}
{{- end -}}

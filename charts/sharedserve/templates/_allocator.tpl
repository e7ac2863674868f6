{{/* The DRA driver's cluster pieces, as k8s/overlays/dra/driver holds them (its files' comments say
why): its ServiceAccount and RBAC, the admission policy that keeps each node's driver to its own
ResourceSlice, the DeviceClass pods claim from. */}}
{{- define "sharedserve.draDriver" -}}
---
# The DRA driver's identity towards the API server: it reads ResourceClaims and writes its node's
# ResourceSlice (rbac.yaml), and only its own node's (resourceslice-policy.yaml). Tokens are
# mounted only into pods that ask (the driver's DaemonSet does).
apiVersion: v1
kind: ServiceAccount
metadata:
  name: sharedserve-dra-driver
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: sharedserve-allocator
    app.kubernetes.io/component: allocator
    app.kubernetes.io/part-of: sharedserve
automountServiceAccountToken: false
---
# What the DRA driver does with the API, and nothing more:
# - resourceslices create, update, delete: keep its node's slice as the node's GPUs are (publish
#   it, replace it when a GPU's health changes, delete it where the node has no GPU). No get,
#   list or watch: it writes the whole slice each time and needs to read none.
# - resourceclaims get: read a claim the kubelet asks it to prepare (NodePrepareResources names
#   the claim; the allocation, and the memory consumed, are in its status).
# ResourceSlices are cluster-scoped, so this is a ClusterRole; RBAC cannot narrow it to the
# driver's own node, which resourceslice-policy.yaml does.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sharedserve-dra-driver
  labels:
    app.kubernetes.io/name: sharedserve-allocator
    app.kubernetes.io/component: allocator
    app.kubernetes.io/part-of: sharedserve
rules:
  - apiGroups:
      - resource.k8s.io
    resources:
      - resourceslices
    verbs:
      - create
      - update
      - delete
  - apiGroups:
      - resource.k8s.io
    resources:
      - resourceclaims
    verbs:
      - get
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: sharedserve-dra-driver
  labels:
    app.kubernetes.io/name: sharedserve-allocator
    app.kubernetes.io/component: allocator
    app.kubernetes.io/part-of: sharedserve
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: sharedserve-dra-driver
subjects:
  - kind: ServiceAccount
    name: sharedserve-dra-driver
    namespace: {{ .Release.Namespace }}
---
# RBAC lets the driver's ServiceAccount write every ResourceSlice in the cluster; this policy
# narrows its writes to its own node's slice of its own driver, so one compromised node cannot
# withdraw or invent GPUs on the others. The API server stamps a pod's ServiceAccount token with
# the pod's node (`authentication.kubernetes.io/node-name` in the user's extra info;
# ServiceAccountTokenPodNodeInfo, on by default since 1.30 and GA in 1.32), and the policy
# compares it with the slice's `spec.nodeName` (the old object's on DELETE). Both `nodeName` and
# `driver` are immutable, so an UPDATE cannot move a slice off a node it was admitted on.
#
# The ServiceAccount is matched by name in any namespace, so an overlay that moves the driver to
# another namespace keeps the policy; one that renames the ServiceAccount must change the name
# here too (tested against serviceaccount.yaml). ValidatingAdmissionPolicy is GA since 1.30.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: sharedserve-dra-resourceslices
  labels:
    app.kubernetes.io/part-of: sharedserve
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups:
          - resource.k8s.io
        apiVersions:
          - "*"
        operations:
          - CREATE
          - UPDATE
          - DELETE
        resources:
          - resourceslices
  matchConditions:
    - name: is-the-sharedserve-dra-driver
      expression: >-
        request.userInfo.username.startsWith("system:serviceaccount:") &&
        request.userInfo.username.endsWith(":sharedserve-dra-driver")
  variables:
    - name: requesterNode
      expression: >-
        request.userInfo.extra[?"authentication.kubernetes.io/node-name"][0].orValue("")
    - name: slice
      expression: 'request.operation == "DELETE" ? oldObject : object'
  validations:
    - expression: variables.requesterNode != ""
      message: >-
        the sharedserve DRA driver's token names no node: it must run in a pod (a token bound
        to it carries the node's name)
      reason: Forbidden
    - expression: variables.slice.spec.?nodeName.orValue("") == variables.requesterNode
      messageExpression: >-
        "the sharedserve DRA driver on node " + variables.requesterNode +
        " may write only that node's ResourceSlice, not " + variables.slice.metadata.name
      reason: Forbidden
    - expression: variables.slice.spec.driver == "gpu.sharedserve.io"
      messageExpression: >-
        "the sharedserve DRA driver may write only ResourceSlices of driver gpu.sharedserve.io,
        not " + variables.slice.spec.driver
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: sharedserve-dra-resourceslices
  labels:
    app.kubernetes.io/part-of: sharedserve
spec:
  policyName: sharedserve-dra-resourceslices
  validationActions:
    - Deny
---
# What a claim names to get GPU memory from sharedserve (`deviceClassName: gpu.sharedserve.io`):
# every device the driver gpu.sharedserve.io publishes, one per GPU (or, with `--slots N`, N per
# GPU). A claim narrows it further with its own selectors, e.g.
# `device.attributes["gpu.sharedserve.io"].productName == "Tesla T4"`.
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.sharedserve.io
  labels:
    app.kubernetes.io/part-of: sharedserve
spec:
  selectors:
    - cel:
        expression: device.driver == "gpu.sharedserve.io"
{{- end -}}

{{/* The MPS control daemon on every GPU node, as k8s/overlays/mps runs it. */}}
{{- define "sharedserve.mpsControl" -}}
---
# CUDA's MPS control daemon, one per GPU node, in the foreground (-f) so the kubelet supervises
# it. nvidia-cuda-mps-control comes from the node's driver: the NVIDIA runtime mounts it into the
# container for the `compute` capability.
#
# Privileges: an init container running as root with only CAP_CHOWN creates the host
# directories and hands them to user 10001; the daemon itself runs as 10001 (the user of the
# model servers, since an MPS server serves one user) with no capabilities and no privilege
# escalation. It shares /dev/shm with its clients through the host directory shm/ instead of
# hostIPC, so neither it nor the model pods join the host's IPC namespace.
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: sharedserve-mps-control
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: sharedserve-mps-control
    app.kubernetes.io/component: mps-control
    app.kubernetes.io/part-of: sharedserve
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: sharedserve-mps-control
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  template:
    metadata:
      labels:
        app.kubernetes.io/name: sharedserve-mps-control
        app.kubernetes.io/component: mps-control
        app.kubernetes.io/part-of: sharedserve
    spec:
      priorityClassName: sharedserve-node-critical
      # The same nodes as the allocator.
      nodeSelector:
        sharedserve.io/gpu: "true"
      tolerations:
        - key: nvidia.com/gpu
          operator: Exists
          effect: NoSchedule
        - key: sharedserve.io/gpu
          operator: Exists
          effect: NoSchedule
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        seccompProfile:
          type: RuntimeDefault
      initContainers:
        - name: prepare
          image: {{ .Values.image | quote }}
          imagePullPolicy: IfNotPresent
          command:
            - /bin/sh
            - -c
          args:
            - >-
              mkdir -p /mps/pipe /mps/log /mps/shm &&
              chown 10001:10001 /mps/pipe /mps/log /mps/shm &&
              chmod 0700 /mps/log
          env:
            - name: NVIDIA_VISIBLE_DEVICES
              value: void
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
            limits:
              cpu: 100m
              memory: 64Mi
          securityContext:
            runAsUser: 0
            runAsGroup: 0
            runAsNonRoot: false
            privileged: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop:
                - ALL
              add:
                - CHOWN
          volumeMounts:
            - name: mps-root
              mountPath: /mps
      containers:
        - name: mps-control
          image: {{ .Values.image | quote }}
          imagePullPolicy: IfNotPresent
          command:
            - nvidia-cuda-mps-control
            - -f
          env:
            - name: NVIDIA_VISIBLE_DEVICES
              value: all
            - name: NVIDIA_DRIVER_CAPABILITIES
              value: compute,utility
            - name: CUDA_MPS_PIPE_DIRECTORY
              value: /run/sharedserve/mps/pipe
            - name: CUDA_MPS_LOG_DIRECTORY
              value: /run/sharedserve/mps/log
          resources:
            requests:
              cpu: 100m
              memory: 128Mi
            limits:
              cpu: 100m
              memory: 128Mi
          securityContext:
            runAsUser: 10001
            runAsGroup: 10001
            runAsNonRoot: true
            privileged: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop:
                - ALL
          volumeMounts:
            - name: mps-pipe
              mountPath: /run/sharedserve/mps/pipe
            - name: mps-log
              mountPath: /run/sharedserve/mps/log
            - name: mps-shm
              mountPath: /dev/shm
      volumes:
        - name: mps-root
          hostPath:
            path: /run/sharedserve/mps
            type: DirectoryOrCreate
        - name: mps-pipe
          hostPath:
            path: /run/sharedserve/mps/pipe
            type: DirectoryOrCreate
        - name: mps-log
          hostPath:
            path: /run/sharedserve/mps/log
            type: DirectoryOrCreate
        - name: mps-shm
          hostPath:
            path: /run/sharedserve/mps/shm
            type: DirectoryOrCreate
{{- end -}}

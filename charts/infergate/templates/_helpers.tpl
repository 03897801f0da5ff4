{{/* Labels of every object: infergate's own, and Helm's bookkeeping. */}}
{{- define "infergate.labels" -}}
app.kubernetes.io/name: infergate
{{ include "infergate.helmLabels" . }}
{{- end }}

{{/* Helm's bookkeeping labels (the only ones on the CRDs). */}}
{{- define "infergate.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The caBundle source cert-manager's injector reads (certManager mode). */}}
{{- define "infergate.injectCaFrom" -}}
{{ printf "%s/infergate-webhook" .Release.Namespace }}
{{- end }}

{{/*
The rules of the reconciler's children and of the services it watches, held
by the ClusterRole (every namespace) or by a Role in each managed namespace.
`cluster` adds clusterinferencepolicies, acceleratorclasses and modelprofiles (read
cluster-wide in both modes) and the access reviews.
*/}}
{{- define "infergate.workloadRules" -}}
# Webhook caches and the reconciler's watch of services, policies and
# AcceleratorClasses and ModelProfiles.
- apiGroups: ["infergate.dev"]
  resources: {{ if .cluster }}["inferenceservices", "clusterinferencepolicies", "inferencepolicies", "acceleratorclasses", "modelprofiles"]{{ else }}["inferenceservices", "inferencepolicies"]{{ end }}
  verbs: ["get", "list", "watch"]
{{- if .cluster }}
# Access reviews: may the requester use the Secrets, ConfigMaps and
# ServiceAccount a service write references (admission's only API call).
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
- apiGroups: ["infergate.dev"]
  resources: ["inferenceservices/status"]
  verbs: ["get", "patch", "update"]
# Children carry a controller ownerReference with blockOwnerDeletion, which
# the apiserver allows only to those who may update the owner's finalizers.
- apiGroups: ["infergate.dev"]
  resources: ["inferenceservices/finalizers"]
  verbs: ["update"]
{{- if .cluster }}
# Namespace labels for policy namespaceSelectors.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end }}
# Children the reconciler owns (server-side apply, deletion of unwanted ones).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Why a track's engine pods do not start (the Ready condition): a watch
# on them, metadata and status; the canary's restarts for the rollout.
{{- if .cluster }}
# Free devices per AcceleratorClass: a watch of the bound, unfinished
# pods, each kept only as its node, phase and extended-resource requests
# (nothing of a pod that requests none).
{{- end }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- if .cluster }}
# Free devices per AcceleratorClass: each node's labels, readiness,
# cordon, NoSchedule/NoExecute taints and extended allocatable.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["ray.io"]
  resources: ["rayservices"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Replicas that span nodes: a LeaderWorkerSet per track (once its CRD is
# installed).
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Scaling: the worker group's replicas on the RayService's own RayClusters.
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["get", "patch"]
# Engine metrics: a PodMonitor per service (once its CRD is installed).
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# backendKind InferencePool: a pool per track and, with endpointPicker
# mode Owned, each pool's endpoint picker (Deployment and Service above,
# its ServiceAccount, Role, RoleBinding and ConfigMap here).
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["serviceaccounts", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Kubernetes lets infergate grant a picker's Role only what infergate holds
# itself: what a picker reads (pods, the llm-d router's objectives and
# rewrites), and its leader election when it runs more than one replica.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["llm-d.ai"]
  resources: ["inferenceobjectives", "inferencemodelrewrites"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Events about services.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* caBundle injection (self-signed mode), only into infergate's own objects. */}}
{{- define "infergate.caBundleRules" -}}
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]
  resourceNames: ["infergate"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames: ["inferenceservices.infergate.dev"]
  verbs: ["get", "update", "patch"]
{{- end }}

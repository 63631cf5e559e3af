{{/*
Names and labels. Component-level helpers take a dict: (dict "root" $ "component" "router").
*/}}

{{/* Chart name, or nameOverride. */}}
{{- define "specdec.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name prefix of every resource. */}}
{{- define "specdec.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "specdec.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of a component's Deployment, Service, ConfigMap, PDB and HPA. */}}
{{- define "specdec.componentName" -}}
{{- printf "%s-%s" (include "specdec.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select a component's pods (immutable in a Deployment: keep them stable). */}}
{{- define "specdec.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specdec.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every label of a component's resources. */}}
{{- define "specdec.labels" -}}
helm.sh/chart: {{ include "specdec.chart" .root }}
{{ include "specdec.selectorLabels" . }}
app.kubernetes.io/part-of: specdec
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* Image reference of a component. */}}
{{- define "specdec.image" -}}
{{- $image := .root.Values.image }}
{{- $tag := default .root.Chart.AppVersion $image.tag }}
{{- if $image.perComponent }}
{{- printf "%s-%s:%s" $image.repository .component $tag }}
{{- else }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- end }}

{{/* Absolute path of a model directory: (dict "root" $ "key" "target"). */}}
{{- define "specdec.modelPath" -}}
{{- $rel := required (printf "models.%s is required" .key) (index .root.Values.models .key) }}
{{- printf "%s/%s" (trimSuffix "/" .root.Values.models.mountPath) (trimPrefix "/" $rel) }}
{{- end }}

{{/* Name of a component's headless Service (target and drafter). */}}
{{- define "specdec.headlessName" -}}
{{- printf "%s-headless" (include "specdec.componentName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* In-cluster gRPC address of a component's Service. */}}
{{- define "specdec.endpoint" -}}
{{- $port := .root.Values.ports.grpc }}
{{- if eq .component "router" }}{{ $port = .root.Values.router.service.port }}{{ end }}
{{- printf "%s:%d" (include "specdec.componentName" .) (int $port) }}
{{- end }}

{{/*
The router's address of a backend component: for the target and drafter with
router.headlessBackends, a dns:/// name of the headless Service, which resolves to every ready
pod (the router's round_robin channel spreads Session streams over them); otherwise the
ClusterIP Service.
*/}}
{{- define "specdec.backendAddress" -}}
{{- if and .root.Values.router.headlessBackends (has .component (list "target" "drafter")) }}
{{- printf "dns:///%s.%s.svc.%s:%d" (include "specdec.headlessName" .) .root.Release.Namespace (trimSuffix "." .root.Values.clusterDomain) (int .root.Values.ports.grpc) }}
{{- else }}
{{- include "specdec.endpoint" . }}
{{- end }}
{{- end }}

{{/* The components this release deploys, in start-up order. */}}
{{- define "specdec.components" -}}
{{- $c := list "target" }}
{{- if .Values.drafter.enabled }}{{ $c = append $c "drafter" }}{{ end }}
{{- if .Values.policy.enabled }}{{ $c = append $c "policy" }}{{ end }}
{{- $c = append $c "router" }}
{{- join " " $c }}
{{- end }}

{{/* The model volume's source (the part of a pod volume after its name). */}}
{{- define "specdec.modelVolume" -}}
{{- $vol := .Values.models.volume }}
{{- if eq $vol.type "pvc" -}}
persistentVolumeClaim:
  claimName: {{ $vol.pvc.existingClaim | default (printf "%s-models" (include "specdec.fullname" .)) }}
{{- else if eq $vol.type "hostPath" -}}
hostPath:
  path: {{ required "models.volume.hostPath.path is required" $vol.hostPath.path }}
  type: Directory
{{- else if eq $vol.type "emptyDir" -}}
emptyDir:
  {{- with $vol.emptyDir.sizeLimit }}
  sizeLimit: {{ . }}
  {{- end }}
{{- else }}
{{- fail (printf "models.volume.type must be pvc, hostPath or emptyDir (got %q)" $vol.type) }}
{{- end }}
{{- end }}

{{/*
Directory where the router mounts the API keys Secret (router.apiKeys.existingSecret). The whole
Secret is mounted, not one key through subPath: the kubelet then swaps in updated content
(through the ..data symlink), and the router, which re-reads the file when its modification time
changes, applies it without a restart.
*/}}
{{- define "specdec.apiKeysDir" -}}
/etc/specdec/api-keys
{{- end }}

{{/* Path of the router's API keys file, or "" when router.apiKeys.existingSecret is not set. */}}
{{- define "specdec.apiKeysFile" -}}
{{- $k := .Values.router.apiKeys }}
{{- if $k.existingSecret }}
{{- $key := required "router.apiKeys.key is required with router.apiKeys.existingSecret" $k.key }}
{{- if contains "/" $key }}
{{- fail (printf "router.apiKeys.key must be a data key of the Secret, not a path (got %q)" $key) }}
{{- end }}
{{- printf "%s/%s" (include "specdec.apiKeysDir" .) $key }}
{{- end }}
{{- end }}

{{/*
TLS (tls.enabled). Every pod mounts the Secret as a directory here (no subPath: the kubelet then
swaps in renewed files, tls.crt and tls.key together, and gRPC's file watcher picks them up).
*/}}
{{- define "specdec.tlsDir" -}}
/etc/specdec/tls
{{- end }}

{{/* Name of the cert-manager Certificate (tls.certManager.enabled). */}}
{{- define "specdec.tlsCertificateName" -}}
{{- printf "%s-tls" (include "specdec.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the TLS Secret; fails when tls.enabled has neither a Secret nor cert-manager. */}}
{{- define "specdec.tlsSecretName" -}}
{{- $tls := .Values.tls }}
{{- if $tls.secretName }}
{{- $tls.secretName }}
{{- else if $tls.certManager.enabled }}
{{- include "specdec.tlsCertificateName" . }}
{{- else }}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt) or tls.certManager.enabled" }}
{{- end }}
{{- end }}

{{/*
The Secret's files a component reads, space-separated: every gRPC port serves tls.crt/tls.key;
the router also checks the backends against ca.crt; ca.crt is the client CA of the backends with
tls.mutual, and of the router with tls.routerMutual.
*/}}
{{- define "specdec.tlsFiles" -}}
{{- $tls := .root.Values.tls }}
{{- if or (eq .component "router") $tls.mutual }}
{{- "tls.crt tls.key ca.crt" }}
{{- else }}
{{- "tls.crt tls.key" }}
{{- end }}
{{- end }}

{{/*
A component's TLS environment variables (ConfigMap data lines), with tls.enabled. Servers:
SPECDEC_<COMPONENT>_TLS_CERT/KEY, and _TLS_CLIENT_CA for mTLS. The router's channels to the
backends: SPECDEC_BACKEND_TLS_CA, and with tls.mutual its client certificate, the same tls.crt
(so that certificate must allow client auth as well as server auth).
*/}}
{{- define "specdec.tlsEnv" -}}
{{- $tls := .root.Values.tls }}
{{- $dir := include "specdec.tlsDir" .root }}
{{- $prefix := printf "SPECDEC_%s" (upper .component) }}
{{- $isRouter := eq .component "router" }}
{{ $prefix }}_TLS_CERT: {{ printf "%s/tls.crt" $dir | quote }}
{{ $prefix }}_TLS_KEY: {{ printf "%s/tls.key" $dir | quote }}
{{- if ternary $tls.routerMutual $tls.mutual $isRouter }}
{{ $prefix }}_TLS_CLIENT_CA: {{ printf "%s/ca.crt" $dir | quote }}
{{- end }}
{{- if $isRouter }}
SPECDEC_BACKEND_TLS_CA: {{ printf "%s/ca.crt" $dir | quote }}
{{- if $tls.mutual }}
SPECDEC_BACKEND_TLS_CERT: {{ printf "%s/tls.crt" $dir | quote }}
SPECDEC_BACKEND_TLS_KEY: {{ printf "%s/tls.key" $dir | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
DNS names the certificate must hold: every Service of the release (the router dials the policy,
and the target and drafter without router.headlessBackends, by their short names; the target
and drafter with it by their headless Services' full names), each as <name>, <name>.<namespace>,
<name>.<namespace>.svc and <name>.<namespace>.svc.<clusterDomain>; then
tls.certManager.extraDnsNames.
*/}}
{{- define "specdec.tlsDnsNames" -}}
{{- $root := . }}
{{- $ns := .Release.Namespace }}
{{- $domain := trimSuffix "." .Values.clusterDomain }}
{{- $names := list }}
{{- range $component := splitList " " (include "specdec.components" $root) }}
{{- $ctx := dict "root" $root "component" $component }}
{{- $svcs := list (include "specdec.componentName" $ctx) }}
{{- if has $component (list "target" "drafter") }}
{{- $svcs = append $svcs (include "specdec.headlessName" $ctx) }}
{{- end }}
{{- range $svc := $svcs }}
{{- $names = concat $names (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $domain)) }}
{{- end }}
{{- end }}
{{- $names = concat $names (.Values.tls.certManager.extraDnsNames | default (list)) }}
{{- toYaml (uniq $names) }}
{{- end }}

{{/*
Handler of the probes on the gRPC port: (dict "root" $ "tls" bool). Plaintext: a native gRPC
probe of the standard health service (SERVING or not). TLS: a tcpSocket probe of the port,
because the kubelet's gRPC probe cannot do TLS; it only sees whether the port accepts
connections (the port opens once the models are loaded).
*/}}
{{- define "specdec.grpcProbe" -}}
{{- if .tls -}}
tcpSocket:
  port: grpc
{{- else -}}
grpc:
  port: {{ .root.Values.ports.grpc | int }}
{{- end }}
{{- end }}

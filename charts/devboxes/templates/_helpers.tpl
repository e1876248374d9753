{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "devboxes.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name of the release's objects. */}}
{{- define "devboxes.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "devboxes.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "devboxes.selectorLabels" -}}
app.kubernetes.io/name: {{ include "devboxes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "devboxes.labels" -}}
helm.sh/chart: {{ include "devboxes.chart" . }}
{{ include "devboxes.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Namespace in which boxes live and the controller's Role applies. */}}
{{- define "devboxes.boxNamespace" -}}
{{- .Values.controller.namespace | default .Release.Namespace }}
{{- end }}

{{/* Cluster-scoped objects are shared by every release: the namespace keeps the name unique. */}}
{{- define "devboxes.clusterRoleName" -}}
{{- printf "%s-%s-cluster-read" .Release.Namespace (include "devboxes.fullname" .) }}
{{- end }}

{{- define "devboxes.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The Secret holding the operator token: the operator's own, else the one this chart generates. */}}
{{- define "devboxes.tokenSecret" -}}
{{- .Values.token.existingSecret | default (printf "%s-token" (include "devboxes.fullname" .)) }}
{{- end }}

{{/*
The generated token, base64-encoded. An upgrade must not change it (every client holds a
copy), so the value already in the cluster wins; only a first install draws a new one.
Where `lookup` cannot reach a cluster (`helm template`, client-side dry runs, GitOps tools
that render offline) each render draws anew: those setups need token.existingSecret.
*/}}
{{- define "devboxes.generatedToken" -}}
{{- $current := lookup "v1" "Secret" .Release.Namespace (include "devboxes.tokenSecret" .) }}
{{- dig "data" .Values.token.key "" $current | default (randAlphaNum 64 | b64enc) }}
{{- end }}

{{/*
Rules of the values that JSON Schema cannot express. Each failure stops the render with
a message naming the offending value; the controller checks the same rules at start-up.
*/}}
{{- define "devboxes.validate" -}}
{{- $seen := dict }}
{{- range $index, $profile := .Values.gpu.profiles }}
{{- if hasKey $seen $profile.name }}
{{- fail (printf "gpu.profiles[%d].name: profile name %q is used more than once; profile names must be unique" $index $profile.name) }}
{{- end }}
{{- $_ := set $seen $profile.name true }}
{{- end }}
{{- with .Values.gpu.defaultProfile }}
{{- if not (hasKey $seen .) }}
{{- $names := keys $seen | sortAlpha }}
{{- fail (printf "gpu.defaultProfile: %q is not a configured profile (configured: %s)" . (ternary "none" (join ", " $names) (empty $names))) }}
{{- end }}
{{- end }}
{{- $images := dict }}
{{- range $index, $profile := (.Values.controller.images | default dict).profiles }}
{{- if hasKey $images $profile.name }}
{{- fail (printf "controller.images.profiles[%d].name: image profile name %q is used more than once; image profile names must be unique" $index $profile.name) }}
{{- end }}
{{- $_ := set $images $profile.name true }}
{{- range $position, $accelerator := $profile.accelerators }}
{{- if and (ne $accelerator "cpu") (not (hasKey $seen $accelerator)) }}
{{- fail (printf "controller.images.profiles[%d].accelerators[%d]: %q is neither \"cpu\" nor a configured GPU profile" $index $position $accelerator) }}
{{- end }}
{{- end }}
{{- end }}
{{- $sidecars := dict }}
{{- range $index, $sidecar := .Values.controller.sidecars }}
{{- if hasKey $sidecars $sidecar.name }}
{{- fail (printf "controller.sidecars[%d].name: sidecar name %q is used more than once" $index $sidecar.name) }}
{{- end }}
{{- $_ := set $sidecars $sidecar.name true }}
{{- end }}
{{- range $index, $sidecar := .Values.controller.sidecars }}
{{- if kindIs "slice" $sidecar.env }}
{{- $envNames := dict }}
{{- range $sidecar.env }}
{{- if hasKey $envNames .name }}
{{- fail (printf "controller.sidecars[%d].env: %q is set more than once" $index .name) }}
{{- end }}
{{- $_ := set $envNames .name true }}
{{- end }}
{{- end }}
{{- end }}
{{- range $preset, $sizes := .Values.controller.presets }}
{{- $request := include "devboxes.quantityValue" $sizes.memoryRequest | float64 }}
{{- $limit := include "devboxes.quantityValue" $sizes.memoryLimit | float64 }}
{{- if gt $request $limit }}
{{- fail (printf "controller.presets.%s.memoryRequest: %s must not exceed memoryLimit (%s)" $preset $sizes.memoryRequest $sizes.memoryLimit) }}
{{- end }}
{{- end }}
{{- $ttl := .Values.controller.ttl }}
{{- if gt (int $ttl.defaultHours) (int $ttl.maxHours) }}
{{- fail (printf "controller.ttl.defaultHours (%v) must not exceed controller.ttl.maxHours (%v)" $ttl.defaultHours $ttl.maxHours) }}
{{- end }}
{{- end }}

{{/* The numeric value of a quantity that the schema accepted, e.g. "2Gi" -> 2147483648. */}}
{{- define "devboxes.quantityValue" -}}
{{- $suffix := regexFind "(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)$" . }}
{{- $factors := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 }}
{{- mulf (trimSuffix $suffix . | float64) (get $factors $suffix) }}
{{- end }}

{{/* The controller's settings file: the `controller` block plus `gpu`, namespace filled in. */}}
{{- define "devboxes.settings" -}}
{{- include "devboxes.validate" . }}
{{- $settings := deepCopy .Values.controller }}
{{- $_ := set $settings "namespace" (include "devboxes.boxNamespace" .) }}
{{- $_ := set $settings "gpu" (deepCopy .Values.gpu) }}
{{- $idle := deepCopy (default dict .Values.controller.idle) }}
{{- if not $idle.controllerUrl }}
{{- $_ := set $idle "controllerUrl" (printf "http://%s.%s.svc:%v" (include "devboxes.fullname" .) .Release.Namespace .Values.service.port) }}
{{- end }}
{{- $_ := set $settings "idle" $idle }}
{{- toYaml $settings }}
{{- end }}

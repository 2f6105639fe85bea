{{/*
Names. Every object is <fullname>-<component>; selectors use the
app.kubernetes.io/instance and app.kubernetes.io/component labels.
*/}}
{{- define "levee.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "levee.name" -}}
{{- printf "%s-%s" (include "levee.fullname" .root) .component -}}
{{- end -}}

{{- define "levee.selectorLabels" -}}
app.kubernetes.io/name: levee
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "levee.labels" -}}
{{ include "levee.selectorLabels" . }}
app.kubernetes.io/part-of: levee
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
Ports: pkg/wellknown's defaults (the chart's tests check them). Metrics are
MetricsOffset (2000) above each gRPC port and also serve the probes.
*/}}
{{- define "levee.port.gateway" -}}7700{{- end -}}
{{- define "levee.port.verifier" -}}7701{{- end -}}
{{- define "levee.port.budgetd" -}}7702{{- end -}}
{{- define "levee.port.metricsOffset" -}}2000{{- end -}}
{{- define "levee.port.etcdClient" -}}2379{{- end -}}
{{- define "levee.port.etcdPeer" -}}2380{{- end -}}

{{/* The fully qualified name of a component's Service. */}}
{{- define "levee.serviceHost" -}}
{{- printf "%s.%s.svc.%s" (include "levee.name" .) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* The name the verifiers' certificate carries and the gateway checks. */}}
{{- define "levee.verifierServerName" -}}
{{- include "levee.serviceHost" (dict "root" . "component" "verifier") -}}
{{- end -}}

{{/* etcd's client endpoints, comma-separated. */}}
{{- define "levee.etcdEndpoints" -}}
{{- if .Values.etcd.external.endpoints -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- else -}}
{{- $host := include "levee.serviceHost" (dict "root" . "component" "etcd") -}}
{{- $name := include "levee.name" (dict "root" . "component" "etcd") -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "https://%s-%d.%s:%s" $name $i $host (include "levee.port.etcdClient" $)) -}}
{{- end -}}
{{- join "," $eps -}}
{{- end -}}
{{- end -}}

{{/* budgetd's replicas by their stable names, comma-separated. */}}
{{- define "levee.budgetdTargets" -}}
{{- $host := include "levee.serviceHost" (dict "root" . "component" "budgetd") -}}
{{- $name := include "levee.name" (dict "root" . "component" "budgetd") -}}
{{- $t := list -}}
{{- range $i := until (int .Values.budgetd.replicas) -}}
{{- $t = append $t (printf "%s-%d.%s:%s" $name $i $host (include "levee.port.budgetd" $)) -}}
{{- end -}}
{{- join "," $t -}}
{{- end -}}

{{/* The TLS flags: the component's Secret is mounted at /certs. */}}
{{- define "levee.tlsArgs" -}}
- -tls-ca=/certs/ca.crt
- -tls-cert=/certs/tls.crt
- -tls-key=/certs/tls.key
{{- end -}}

{{- define "levee.tlsVolume" -}}
- name: certs
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
{{- end -}}

{{/*
Pods: no service-account token (Levee calls no Kubernetes API), no service
links; the security contexts of values.yaml.
*/}}
{{- define "levee.podSecurity" -}}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{- define "levee.containerSecurity" -}}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
{{- end -}}

{{- define "levee.image" -}}
image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}

{{/*
Probes, answered on the metrics port by the gRPC health service in
plaintext (internal/serving.Probes), never by a worker: "liveness" is
SERVING while the process answers; "readiness" while it is warm and not
draining, never because it is busy (a busy node sheds). The startup probe
gives the process a minute to listen.
*/}}
{{- define "levee.probes" -}}
{{- $p := .root.Values.probes -}}
startupProbe:
  grpc:
    port: {{ .metricsPort }}
    service: liveness
  {{- toYaml $p.startup | nindent 2 }}
livenessProbe:
  grpc:
    port: {{ .metricsPort }}
    service: liveness
  {{- toYaml $p.liveness | nindent 2 }}
readinessProbe:
  grpc:
    port: {{ .metricsPort }}
    service: readiness
  {{- toYaml $p.readiness | nindent 2 }}
{{- end -}}

{{/* Spread each component's pods over nodes, softly. */}}
{{- define "levee.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "levee.selectorLabels" . | nindent 8 }}
{{- end -}}

{{- define "levee.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A verifier's resources from its flags: CPU = workers (one hash per core),
memory = 2 × workers × Argon2 memory + headroom (what -memory-budget auto
needs to admit one hash per worker with the resident heap). Requests equal
limits: a Guaranteed pod, whose memory is not reclaimed under pressure.
*/}}
{{- define "levee.verifierResources" -}}
{{- if .Values.verifier.resources -}}
{{- toYaml .Values.verifier.resources -}}
{{- else -}}
{{- $w := int .Values.verifier.workers -}}
{{- $mem := add (div (add (mul 2 $w .Values.verifier.argon2.memoryKiB) 1023) 1024) .Values.verifier.memoryHeadroomMiB -}}
requests:
  cpu: {{ $w | quote }}
  memory: {{ printf "%dMi" $mem }}
limits:
  cpu: {{ $w | quote }}
  memory: {{ printf "%dMi" $mem }}
{{- end -}}
{{- end -}}

{{/* NetworkPolicy: the pods of one component, and a metrics port open to "from" (anyone when empty). */}}
{{- define "levee.peer" -}}
- podSelector:
    matchLabels:
      {{- include "levee.selectorLabels" . | nindent 6 }}
{{- end -}}
{{- define "levee.metricsRule" -}}
- ports:
    - {protocol: TCP, port: {{ .port }}}
  {{- with .from }}
  from:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

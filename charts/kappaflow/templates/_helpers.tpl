{{/* Names and labels shared by the templates. */}}
{{- define "kappaflow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kappaflow.selectorLabels" -}}
app.kubernetes.io/name: kappaflow-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kappaflow.labels" -}}
{{ include "kappaflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kappaflow
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kappaflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kappaflow.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

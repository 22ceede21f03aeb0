{{/* The image reference: repository and tag (the chart's appVersion unless image.tag says). */}}
{{- define "sluice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

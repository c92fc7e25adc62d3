{{/*
NOT FOR PRODUCTION. A bundled single-instance server for evaluation: a
StatefulSet of one pod with a PersistentVolumeClaim, its Service, and (with
networkPolicy.enabled) a NetworkPolicy that admits only this release's pods
and PicoBot's session pods. Called with a dict:

  ctx        the root context
  component  postgres | redis | s3
  values     the server's .bundled values
  port       the TCP port it serves
  uid        the user (and group) the image runs its server as
  dataPath   where the volume is mounted
  container  YAML of the container's command, args, env and probes
  mounts     YAML of extra volumeMounts (optional)
  volumes    YAML of extra volumes (optional)
*/}}
{{- define "picobot.bundledServer" -}}
{{- $c := dict "ctx" .ctx "component" .component -}}
{{- $name := include "picobot.componentName" $c -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "picobot.labels" $c | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "picobot.selectorLabels" $c | nindent 4 }}
  ports:
    - name: {{ .component }}
      port: {{ .port }}
      targetPort: {{ .port }}
      protocol: TCP
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ $name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "picobot.labels" $c | nindent 4 }}
  annotations:
    picobot.io/not-for-production: "bundled single-instance server for evaluation"
spec:
  serviceName: {{ $name }}
  replicas: 1
  selector:
    matchLabels:
      {{- include "picobot.selectorLabels" $c | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "picobot.labels" $c | nindent 8 }}
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: {{ .uid }}
        runAsGroup: {{ .uid }}
        fsGroup: {{ .uid }}
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .component }}
          image: {{ .values.image }}
          imagePullPolicy: IfNotPresent
          {{- .container | nindent 10 }}
          ports:
            - name: {{ .component }}
              containerPort: {{ .port }}
          securityContext:
            {{- include "picobot.containerSecurityContext" . | nindent 12 }}
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: {{ .dataPath }}
            - name: tmp
              mountPath: /tmp
            {{- with .mounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir: {}
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
  volumeClaimTemplates:
    - metadata:
        name: data
        labels:
          {{- include "picobot.selectorLabels" $c | nindent 10 }}
      spec:
        accessModes: ["ReadWriteOnce"]
        {{- with .values.storage.storageClassName }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ .values.storage.size }}
{{- if .ctx.Values.networkPolicy.enabled }}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ $name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "picobot.labels" $c | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "picobot.selectorLabels" $c | nindent 6 }}
  policyTypes: ["Ingress"]
  ingress:
    - ports:
        - port: {{ .port }}
          protocol: TCP
      from:
        # This release's operator, gateway and migrations.
        - podSelector:
            matchLabels:
              app.kubernetes.io/instance: {{ .ctx.Release.Name }}
        # Session pods in tenant namespaces.
        - namespaceSelector: {}
          podSelector:
            {{- toYaml .ctx.Values.networkPolicy.sessionPodSelector | nindent 12 }}
{{- end }}
{{- end }}

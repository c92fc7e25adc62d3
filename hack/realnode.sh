#!/usr/bin/env bash
# A real single-node Kubernetes v1.37 on this machine, for the real-node e2e and
# for trying the chart by hand: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy and kube-router's NetworkPolicy firewall
# as processes, Debian's containerd + runc + CNI plugins running the pods,
# CoreDNS as a Deployment in kube-system, images imported from OCI archives
# (nothing is pulled; pods use imagePullPolicy: Never).
#
#   hack/realnode.sh up              # build what is missing, start the node, print the state folder
#   hack/realnode.sh down            # stop everything and remove the state (binaries and images stay cached)
#   hack/realnode.sh status          # exits 0 when the node is up
#   hack/realnode.sh import FILE...  # import OCI archives (hack/realnode-images.sh) into the node's containerd
#   hack/realnode.sh kubectl ARGS... # kubectl as cluster admin
#   hack/realnode.sh ctr ARGS...     # ctr on the node's containerd (e.g. -n k8s.io tasks kill -s SIGKILL ID)
#   hack/realnode.sh exec CMD...     # run CMD in the node's network and mount namespaces
#
# Isolation: the whole node lives in a network namespace and a private mount
# namespace of its own, held by a sleeping process and entered with nsenter
# (not `ip netns`, which remounts /sys and hides the cgroup v1 mounts). Its
# only address is NODE_IP on a veth pair whose both ends are inside the
# namespace, with a default route to nowhere: nothing of the node reaches the
# host's network, and every iptables rule and ipset kube-proxy and kube-router
# write is the namespace's. PUBLIC_IP, an address outside every private range
# on the node's loopback, is where tests put servers that stand for the
# internet (model endpoints), which the session pods' NetworkPolicy admits.
# Inside the mount namespace /run, /var/lib and /var/log are
# private folders, and the host-wide sysctls kubelet would change are private
# files. What cannot be namespaced on cgroup v1 are the cgroups: kubelet makes
# /sys/fs/cgroup/*/kubepods, which down removes.
#
# Processes on the host reach the node through nsenter (this script's kubectl
# and exec); test/realnode bridges single TCP ports both ways.
#
# Cost on a 2-core machine: first `up` builds the components (see
# hack/realnode-build.sh); with them cached, up ~10 s, down a few seconds.
set -euo pipefail

HACK=$(cd "$(dirname "$0")" && pwd)
CACHE=${PICOBOT_CACHE:-$HOME/.cache/picobot}
R=${PICOBOT_REALNODE_DIR:-$CACHE/realnode}
NODE_NAME=picobot-node
NODE_IP=10.99.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
# TEST-NET-3 (RFC 5737): public as far as a NetworkPolicy can tell.
PUBLIC_IP=203.0.113.1
# 6443, as kubeadm clusters do: not a service port, so the session pods reach
# it (they read their Agent there) only because the operator's NetworkPolicy
# admits the API server's own addresses and ports.
API_PORT=6443
PAUSE_IMAGE=localhost/picobot-pause:3.10
# Inside the node's private /run.
CONTAINERD_SOCK=/run/picobot-node/containerd/containerd.sock

log() { echo "realnode: $*" >&2; }
usage() { sed -n '9,16p' "$0" >&2; exit 2; }

holder() { cat "$R/run/holder.pid" 2>/dev/null; }

# is_up: the holder of the node's namespaces is alive and is ours (a recycled
# pid has another mount namespace).
is_up() {
  local h
  h=$(holder) || return 1
  [ -n "$h" ] && [ -d "/proc/$h" ] || return 1
  [ "$(readlink "/proc/$h/ns/mnt" 2>/dev/null)" = "$(cat "$R/run/holder.mntns" 2>/dev/null)" ]
}

in_node() { nsenter -t "$(holder)" -m -n -- "$@"; }

kc() { in_node kubectl --cache-dir "$R/kubecache" --kubeconfig "$R/pki/admin.kubeconfig" "$@"; }

ctr_node() { in_node ctr --address "$CONTAINERD_SOCK" "$@"; }

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for i in $(seq 1 $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  log "$what did not come up in ${secs}s"
  return 1
}

# start_daemon NAME CMD...: starts CMD inside the node, logging to logs/NAME.log.
start_daemon() {
  local name=$1
  shift
  # 7>&-: a daemon must not hold the lock of up and down.
  in_node "$@" >"$R/logs/$name.log" 2>&1 </dev/null 7>&- &
  echo $! >"$R/run/$name.pid"
}

# stop_daemon NAME: SIGTERM, SIGKILL after 10 s.
stop_daemon() {
  local f="$R/run/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  rm -f "$f"
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -9 "$pid" 2>/dev/null || true
}

# namespaces starts the holder and gives the node its address.
namespaces() {
  mkdir -p "$R"/{run,logs,host/run,host/var-lib,host/var-log,sysctl}
  # kubelet sets these for the whole machine (they are not namespaced); it
  # gets private files instead, each holding the value kubelet wants when the
  # machine's differs.
  local binds="" s want file
  for s in vm/overcommit_memory:1 vm/panic_on_oom:0 kernel/panic:10 kernel/panic_on_oops:1 \
    kernel/keys/root_maxkeys:1000000 kernel/keys/root_maxbytes:25000000; do
    want=${s#*:}
    s=${s%%:*}
    [ "$(cat "/proc/sys/$s")" = "$want" ] && continue
    file="$R/sysctl/${s//\//.}"
    echo "$want" >"$file"
    binds+="mount --bind $file /proc/sys/$s; "
  done
  unshare --net --mount --propagation private -- /bin/sh -c "
    $binds
    mount --bind $R/host/run /run
    mount --bind $R/host/var-lib /var/lib
    mount --bind $R/host/var-log /var/log
    exec sleep infinity" </dev/null >/dev/null 2>"$R/logs/holder.log" 7>&- &
  echo $! >"$R/run/holder.pid"
  # The holder's mount namespace differs from ours once unshare has run.
  local h=$! mine i
  mine=$(readlink /proc/self/ns/mnt)
  for i in $(seq 1 50); do
    [ "$(readlink "/proc/$h/ns/mnt" 2>/dev/null)" != "$mine" ] && grep -q ' /var/log ' "/proc/$h/mounts" 2>/dev/null && break
    sleep 0.1
  done
  readlink "/proc/$h/ns/mnt" >"$R/run/holder.mntns"
  is_up || { log "the namespace holder did not start: $(cat "$R/logs/holder.log")"; return 1; }
  in_node ip link set lo up
  # A veth pair only to give the node a non-loopback address; kubelet and
  # the API server also want a default route, which leads nowhere.
  in_node ip link add pbnode0 type veth peer name pbnode1
  in_node ip addr add "$NODE_IP/24" dev pbnode0
  in_node ip link set pbnode0 up
  in_node ip link set pbnode1 up
  in_node ip route add default via 10.99.0.2 dev pbnode0
  in_node ip addr add "$PUBLIC_IP/32" dev lo
}

# pki makes a CA, the API server's serving certificate, its client
# certificate for kubelets, the service-account key pair, and a kubeconfig per
# client with a static token.
pki() {
  local p="$R/pki"
  mkdir -p "$p"
  (
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj /CN=picobot-node-ca 2>/dev/null
    sign() { # NAME SUBJECT EXTENSIONS
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 30 -extfile "$1.ext" 2>/dev/null
    }
    sign apiserver /CN=kube-apiserver \
      "subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
    sign kubelet-client /CN=kube-apiserver-kubelet-client/O=system:masters "extendedKeyUsage=clientAuth"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    local user token group line=""
    : >tokens.csv
    for line in admin:system:masters kubelet:system:nodes kcm:system:masters scheduler:system:masters proxy:system:node-proxier netpol:system:masters; do
      user=${line%%:*}
      group=${line#*:}
      token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
      case "$user" in
        admin) echo "$token,admin,admin,$group" >>tokens.csv ;;
        kubelet) echo "$token,system:node:$NODE_NAME,kubelet,$group" >>tokens.csv ;;
        kcm) echo "$token,system:kube-controller-manager,kcm,$group" >>tokens.csv ;;
        scheduler) echo "$token,system:kube-scheduler,scheduler,$group" >>tokens.csv ;;
        proxy) echo "$token,system:kube-proxy,proxy,$group" >>tokens.csv ;;
        netpol) echo "$token,system:kube-router,netpol,$group" >>tokens.csv ;;
      esac
      cat >"$user.kubeconfig" <<K
apiVersion: v1
kind: Config
clusters: [{name: picobot-node, cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: $p/ca.crt}}]
users: [{name: $user, user: {token: $token}}]
contexts: [{name: picobot-node, context: {cluster: picobot-node, user: $user}}]
current-context: picobot-node
K
    done
    chmod 600 ./*.key tokens.csv ./*.kubeconfig
  )
}

# configs renders the daemons' configuration files into etc/.
configs() {
  local e="$R/etc"
  mkdir -p "$e/cni" "$R/kubelet/root" "$R/kubelet/pod-logs" "$R/kubelet/volume-plugins" "$R/cni"
  cat >"$e/containerd.toml" <<T
version = 2
root = "$R/containerd"
state = "/run/picobot-node/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$R/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
  # This VM lacks CAP_SYS_RESOURCE: runc's negative oom_score_adj is refused
  # ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$e/cni"
    max_conf_num = 1
T
  cat >"$e/cni/10-picobot-node.conflist" <<T
{
  "cniVersion": "1.0.0",
  "name": "picobot-node",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$R/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
T
  echo "nameserver $DNS_IP" >"$R/kubelet/resolv.conf"
  cat >"$e/kubelet.yaml" <<T
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 (kubelet 1.35+ refuses it unless told).
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $R/pki/ca.crt}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: $R/kubelet/resolv.conf
failSwapOn: false
podLogsDir: $R/kubelet/pod-logs
volumePluginDir: $R/kubelet/volume-plugins
rotateCertificates: false
serverTLSBootstrap: false
maxPods: 60
# No image garbage collection (the images are imported, not pullable
# again), and eviction only when the disk is really full: a shared
# development disk is often past kubelet's default thresholds.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 100Mi, imagefs.available: 100Mi, nodefs.inodesFree: "1%"}
T
  cat >"$e/kube-proxy.yaml" <<T
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $R/pki/proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# 0 leaves the machine-wide conntrack table size alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
T
  # CoreDNS runs as a pod in kube-system, as on a real cluster: the session
  # pods' NetworkPolicy admits DNS to that namespace's pods, not to the node.
  cat >"$e/coredns.yaml" <<T
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - {apiGroups: [""], resources: [services, namespaces, pods], verbs: [list, watch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
        - name: coredns
          image: $COREDNS_IMAGE
          imagePullPolicy: Never
          args: [-conf, /etc/coredns/Corefile]
          ports:
            - {name: dns, containerPort: 53, protocol: UDP}
            - {name: dns-tcp, containerPort: 53, protocol: TCP}
          readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
          livenessProbe: {httpGet: {path: /health, port: 8080}}
          resources: {limits: {memory: 128Mi}, requests: {cpu: 10m, memory: 32Mi}}
          volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
    - {name: dns, port: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, protocol: TCP}
T
}

# pause_image builds the sandbox image (hack/realnode/pause) once.
pause_image() {
  local out="$CACHE/realnode-images/pause.tar"
  [ -f "$out" ] && { echo "$out"; return; }
  "$HACK/realnode-images.sh" pause
}

# kube_router_health: kube-router's firewall has synced its rules once.
kube_router_health() {
  in_node curl -sf http://127.0.0.1:20244/healthz
}

up() {
  if is_up; then
    echo "$R"
    return
  fi
  [ ! -d "$R/run" ] || down
  local start=$SECONDS bin assets pause coredns
  bin=$("$HACK/realnode-build.sh")
  assets=$("$HACK/controlplane.sh")
  command -v kubectl >/dev/null 2>&1 || PATH="$assets:$PATH"
  pause=$(pause_image)
  coredns=$("$HACK/realnode-images.sh" coredns)
  COREDNS_IMAGE=$(tar -xOf "$coredns" ./index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
  namespaces
  pki
  configs
  local p="$R/pki"

  start_daemon containerd containerd --config "$R/etc/containerd.toml"
  wait_for containerd 30 ctr_node version
  ctr_node -n k8s.io images import "$pause" >/dev/null
  ctr_node -n k8s.io images import "$coredns" >/dev/null

  start_daemon etcd "$assets/etcd" --name "$NODE_NAME" --data-dir "$R/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE_NAME=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381 \
    --unsafe-no-fsync
  wait_for etcd 30 in_node curl -sf http://127.0.0.1:2381/health

  start_daemon apiserver "$assets/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
    --token-auth-file "$p/tokens.csv" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
    --service-account-signing-key-file "$p/sa.key" --service-cluster-ip-range "$SERVICE_CIDR" \
    --kubelet-client-certificate "$p/kubelet-client.crt" --kubelet-client-key "$p/kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP --allow-privileged=true --cert-dir "$R/apiserver-certs"
  wait_for kube-apiserver 60 kc get --raw /readyz

  # --flex-volume-plugin-dir: else it makes /usr/libexec/kubernetes on the host.
  start_daemon kcm "$bin/kube-controller-manager" --kubeconfig "$p/kcm.kubeconfig" \
    --authentication-kubeconfig "$p/kcm.kubeconfig" --authorization-kubeconfig "$p/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" --service-cluster-ip-range "$SERVICE_CIDR" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --flex-volume-plugin-dir "$R/kubelet/volume-plugins"
  start_daemon scheduler "$bin/kube-scheduler" --kubeconfig "$p/scheduler.kubeconfig" \
    --authentication-kubeconfig "$p/scheduler.kubeconfig" --authorization-kubeconfig "$p/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false
  start_daemon kubelet "$bin/kubelet" --config "$R/etc/kubelet.yaml" --kubeconfig "$p/kubelet.kubeconfig" \
    --root-dir "$R/kubelet/root" --cert-dir "$R/kubelet/certs" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
  start_daemon proxy "$bin/kube-proxy" --config "$R/etc/kube-proxy.yaml"
  wait_for kube-controller-manager 60 in_node curl -skf https://127.0.0.1:10257/healthz
  wait_for kube-scheduler 60 in_node curl -skf https://127.0.0.1:10259/healthz
  wait_for kube-proxy 60 in_node curl -sf http://127.0.0.1:10256/healthz
  wait_for "node Ready" 120 node_ready
  # kube-router's NetworkPolicy controller only (no routing, no service
  # proxy, no CNI config): iptables chains and ipsets per pod and policy.
  # It reads the Node object at its start, so after kubelet made it.
  start_daemon netpol "$bin/kube-router" --run-firewall=true --run-router=false --run-service-proxy=false \
    --enable-cni=false --kubeconfig "$p/netpol.kubeconfig" --hostname-override "$NODE_NAME" \
    --service-cluster-ip-range "$SERVICE_CIDR" --health-port 20244 --metrics-port 0
  wait_for "kube-router's firewall" 60 kube_router_health
  # The controller-manager makes each namespace's default ServiceAccount.
  wait_for "the default ServiceAccount" 60 kc get serviceaccount default
  kc apply -f "$R/etc/coredns.yaml" >/dev/null
  kc -n kube-system rollout status deployment/coredns --timeout 120s >/dev/null
  log "up in $((SECONDS - start)) s (kubectl: hack/realnode.sh kubectl ...; logs in $R/logs)"
  echo "$R"
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

down() {
  local start=$SECONDS
  if is_up; then
    local d
    # kubelet first, so that it restarts nothing; then every container.
    for d in kubelet proxy netpol scheduler kcm; do stop_daemon "$d"; done
    local ns t
    for ns in $(ctr_node namespaces ls -q 2>/dev/null); do
      for t in $(ctr_node -n "$ns" tasks ls -q 2>/dev/null); do
        ctr_node -n "$ns" tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1 || true
      done
    done
    for d in containerd apiserver etcd; do stop_daemon "$d"; done
    # Whatever is left in the node's mount namespace (container shims) is
    # the node's: end it by pid.
    local h mnt p
    h=$(holder)
    mnt=$(cat "$R/run/holder.mntns")
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      [ "$p" = "$h" ] && continue
      [ "$(readlink "/proc/$p/ns/mnt" 2>/dev/null)" = "$mnt" ] && kill -9 "$p" 2>/dev/null
    done
    kill "$h" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do [ -d "/proc/$h" ] || break; sleep 0.1; done
  else
    # A holder that died alone leaves daemons behind: they still hold pid files.
    local d
    for d in kubelet proxy netpol scheduler kcm containerd apiserver etcd; do stop_daemon "$d"; done
  fi
  # Container processes live in mount namespaces of their own; they are
  # found by their cgroups (kubepods is the node's alone).
  local procs
  procs=$(find /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)
  # shellcheck disable=SC2086
  [ -z "$procs" ] || kill -9 $procs 2>/dev/null || true
  local i
  for i in $(seq 1 50); do
    find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -z "$(ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null)" ] && break
    sleep 0.1
  done
  [ -z "$(ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null)" ] || log "cgroups left: $(ls -d /sys/fs/cgroup/*/kubepods)"
  # Mounts of the node (overlays, tmpfs volumes) were in its mount namespace
  # and went with it, so its files can go.
  rm -rf "$R"
  log "down in $((SECONDS - start)) s"
}

case "${1:-}" in
  up) exec 7>"$CACHE/realnode.lock"; flock 7; up ;;
  down) exec 7>"$CACHE/realnode.lock"; flock 7; down ;;
  status) is_up ;;
  import)
    shift
    is_up || { log "the node is not up"; exit 1; }
    for f in "$@"; do ctr_node -n k8s.io images import "$f" >&2; done ;;
  ctr) shift; is_up || { log "the node is not up"; exit 1; }; ctr_node "$@" ;;
  kubectl) shift; is_up || { log "the node is not up"; exit 1; }; kc "$@" ;;
  exec) shift; is_up || { log "the node is not up"; exit 1; }; in_node "$@" ;;
  *) usage ;;
esac

#!/bin/bash
# CA, certificates and the service-account key pair for a one-node cluster (ECDSA P-256, openssl CLI).
# Usage: pki.sh DIR NODE_NAME [KUBERNETES_SERVICE_IP [BRIDGE_IP]]  (the API server serves on the bridge address)
# Idempotent: reuses DIR when it was made for the same node name and Service IP.
set -euo pipefail
D=$1; NODE=$2; SVC=${3:-10.96.0.1}; HOST=${4:-10.244.0.1}
mkdir -p "$D"; cd "$D"
[ -f admin.crt ] && [ "$(cat node 2>/dev/null)" = "$NODE $SVC $HOST" ] && exit 0
rm -f ./*.crt ./*.key ./*.pub ./*.srl node
EC="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 -new $EC -keyout ca.key -out ca.crt -days 3650 -subj /CN=kappaflow-real-node-ca 2>/dev/null
issue() { # name subject extensions
  openssl req -new $EC -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf "%b" "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
SERVER="keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
CLIENT="keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
issue apiserver /CN=kube-apiserver "${SERVER}subjectAltName=IP:127.0.0.1,IP:$SVC,IP:$HOST,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
# The kubelet serves on 127.0.0.1 under the node name (which must resolve to 127.0.0.1).
issue kubelet-serving "/CN=system:node:$NODE" "${SERVER}subjectAltName=DNS:$NODE,DNS:localhost,IP:127.0.0.1\n"
issue admin "/O=system:masters/CN=kappaflow-admin" "$CLIENT"
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$CLIENT"
issue controller-manager /CN=system:kube-controller-manager "$CLIENT"
issue scheduler /CN=system:kube-scheduler "$CLIENT"
issue kubelet "/O=system:nodes/CN=system:node:$NODE" "$CLIENT"
issue kube-proxy /CN=system:kube-proxy "$CLIENT"
openssl ecparam -name prime256v1 -genkey -noout -out sa.key
openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
chmod 600 ./*.key
echo "$NODE $SVC $HOST" > node

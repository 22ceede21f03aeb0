#!/usr/bin/env bash
# The demo: brings up the local cluster with sluice, submits the samples (a CapacityQueue with 4 cpu,
# a gang of three pods and three single pods of 1 cpu each, a RayCluster through the real KubeRay
# operator, a SparkApplication through the real Spark operator), shows the queue, ends pods and shows
# the waiting ones being admitted. The cluster stays up afterwards: hack/cluster.sh down removes it.
set -euo pipefail
# shellcheck source=hack/lib/script.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/script.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"

hack/cluster.sh up --with-sluice --with-kuberay --with-spark-operator
eval "$(hack/cluster.sh env)"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { echo "\$ kubectl $*"; kubectl "$@"; }

# Wait for the controller's pass, by the queue's status, not by time.
wait_queue() { # pending admitted
  for _ in $(seq 1 300); do
    [[ $(kubectl get cq research -o jsonpath='{.status.pendingPods}/{.status.admittedPods}' 2>/dev/null) == "$1/$2" ]] && return 0
    sleep 0.1
  done
  echo "demo: the queue did not reach $1 pending / $2 admitted pods; see .cluster/logs/sluice.log" >&2
  return 1
}

kubectl delete -f manifests/samples/pods.yaml --ignore-not-found --grace-period=0 >/dev/null 2>&1 || true
kubectl delete -f manifests/samples/raycluster.yaml --ignore-not-found >/dev/null 2>&1 || true
kubectl delete -f manifests/samples/sparkapplication.yaml --ignore-not-found >/dev/null 2>&1 || true
kubectl delete pods -l spark-role --ignore-not-found --grace-period=0 >/dev/null 2>&1 || true
kubectl delete dynamicworkloads --all --ignore-not-found >/dev/null 2>&1 || true
step "A CapacityQueue with 4 cpu"
show apply -f manifests/samples/capacityqueue.yaml
step "Six pods ask for 6 cpu: the gang etl (3 pods, all or nothing) and three single pods"
show apply -f manifests/samples/pods.yaml
wait_queue 2 4
show get pods -o wide
show get dynamicworkloads
show get capacityqueues
step "Why does single-2 wait?"
echo "\$ kubectl get dwl single-2 -o jsonpath='{.status.message}'"
kubectl get dwl single-2 -o jsonpath='{.status.message}'; echo
step "The gang's pods end: its 3 cpu go back to the queue and the waiting pods are admitted"
for i in 0 1 2; do kubectl annotate pod "etl-$i" sluice.dev/kwok-phase=Succeeded --overwrite >/dev/null; done
wait_queue 0 3
show get dynamicworkloads
show get capacityqueues
step "A RayCluster (head + 2 minimum workers = 3 cpu) with 1 cpu free: the real KubeRay operator creates its pods, all wait"
show apply -f manifests/samples/raycluster.yaml
wait_queue 3 3
show get pods -l ray.io/cluster=analytics
show get dynamicworkloads raycluster-analytics
echo "\$ kubectl get dwl raycluster-analytics -o jsonpath='{.status.message}'"
kubectl get dwl raycluster-analytics -o jsonpath='{.status.message}'; echo
step "The single pods end: the RayCluster's whole gang is admitted at once"
for i in 0 1 2; do kubectl annotate pod "single-$i" sluice.dev/kwok-phase=Succeeded --overwrite >/dev/null; done
wait_queue 0 3
show get pods -l ray.io/cluster=analytics
show get capacityqueues
step "A SparkApplication (driver + 1 minimum executor = 2 cpu) with 1 cpu free: the real Spark operator creates the driver pod, which waits"
show apply -f manifests/samples/sparkapplication.yaml
wait_queue 1 3
show get pods -l spark-role=driver
show get dynamicworkloads sparkapplication-spark-pi
echo "\$ kubectl get dwl sparkapplication-spark-pi -o jsonpath='{.status.message}'"
kubectl get dwl sparkapplication-spark-pi -o jsonpath='{.status.message}'; echo
step "The RayCluster is deleted: its quota goes back, the driver is admitted with its minimum executor's quota reserved"
show delete raycluster analytics
wait_queue 0 1
show get dynamicworkloads
echo "\$ kubectl get dwl sparkapplication-spark-pi -o jsonpath='{.status.reserved}'"
kubectl get dwl sparkapplication-spark-pi -o jsonpath='{.status.reserved}'; echo
show get capacityqueues
step "Done. The cluster is still up: eval \"\$(hack/cluster.sh env)\" to use it, hack/cluster.sh down to remove it."

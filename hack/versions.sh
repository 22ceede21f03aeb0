# Pinned versions of everything hack/ builds. Sourced by the other scripts; change versions here only
# (and the matching go.mod under hack/tools/).
KUBERNETES_VERSION=v1.36.3   # k8s.io/kubernetes; staging modules at v0.36.3 (hack/tools/k8s/go.mod)
ETCD_VERSION=v3.6.16         # go.etcd.io/etcd/server/v3 (hack/tools/etcd/go.mod)
KWOK_VERSION=v0.8.0          # sigs.k8s.io/kwok (hack/tools/kwok/go.mod)
KUBERAY_VERSION=v1.6.0       # github.com/ray-project/kuberay/ray-operator (hack/tools/kuberay/go.mod); v1.7.0 is refused by the Go proxy (403)

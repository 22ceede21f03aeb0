//go:build tools

// Package tools pins the KubeRay operator so `go build github.com/ray-project/kuberay/ray-operator`
// builds the pinned version. (v1.7.0 is refused by the Go module proxy here: 403 "not available".)
package tools

import _ "github.com/ray-project/kuberay/ray-operator"

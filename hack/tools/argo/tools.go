//go:build tools

// Package tools pins the Argo Workflows controller that hack/cluster.sh builds (--with-argo).
package tools

import _ "github.com/argoproj/argo-workflows/v3/cmd/workflow-controller"

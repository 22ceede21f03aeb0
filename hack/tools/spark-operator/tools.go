//go:build tools

// Package tools pins the Kubeflow Spark operator so `go build github.com/kubeflow/spark-operator/v2/cmd/operator`
// builds the pinned version (hack/versions.sh). The replace lines in go.mod are the operator's own
// (a dependency's replaces are ignored, so they are repeated here to build what upstream ships).
package tools

import _ "github.com/kubeflow/spark-operator/v2/cmd/operator"

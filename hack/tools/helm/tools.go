//go:build tools

// Package tools pins Helm's command so `go build helm.sh/helm/v3/cmd/helm` builds the pinned version
// (hack/versions.sh HELM_VERSION): charts/sluice/ is linted, templated and packaged with it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"

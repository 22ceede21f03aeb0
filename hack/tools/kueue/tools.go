//go:build tools

// Package tools pins Kueue so `go build sigs.k8s.io/kueue/cmd/kueue` builds the pinned version
// (hack/versions.sh). go.sum starts from Kueue's own: sigs.k8s.io/scheduler-library v0.1.0-alpha1
// is not in the public checksum database (404), so its hash has to come from there.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"

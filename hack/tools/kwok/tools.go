//go:build tools

// Package tools pins kwok's command so `go build sigs.k8s.io/kwok/cmd/kwok` builds the pinned version.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"

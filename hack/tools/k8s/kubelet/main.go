// Command kubelet is the kubelet of k8s.io/kubernetes, built from the same pinned module as the
// control plane (hack/tools/k8s/main.go) but as a binary of its own, for the real node of
// hack/realnode.sh. It is cmd/kubelet/kubelet.go of k8s.io/kubernetes, verbatim.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand(context.Background())
	os.Exit(cli.Run(command))
}

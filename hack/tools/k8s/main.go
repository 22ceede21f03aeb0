// Command k8s is one binary for the Kubernetes control plane components sluice's tests run:
// it dispatches on the name it was called by (symlinks) or on its first argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "time/tzdata"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl":
	default:
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: k8s kube-apiserver|kube-controller-manager|kube-scheduler|kubectl [flags]")
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	var command *cobra.Command
	switch name {
	case "kube-apiserver":
		command = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		command = controllermanager.NewControllerManagerCommand()
	case "kube-scheduler":
		command = scheduler.NewSchedulerCommand()
	case "kubectl":
		os.Args = append([]string{"kubectl"}, args...)
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		command = kubectl.NewDefaultKubectlCommand()
		command.SetArgs(args)
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "k8s: unknown component %q\n", name)
		os.Exit(2)
	}
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

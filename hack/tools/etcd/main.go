// Command etcd runs etcd's own server main (etcd's go.mod has local replaces, so it cannot be
// installed with `go install`; a module of our own that requires it can build it).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

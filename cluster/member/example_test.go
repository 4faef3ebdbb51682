package member_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/chanos/chanos/cluster/member"
	"github.com/chanos/chanos/monitor"
)

// A monitor that runs as a machine of the cluster "lab" until SIGINT: the
// machine has joined the cluster ('chanos cluster join' put its credential
// in the monitor's directory), etcd runs at 10.0.0.1, and the other
// machines reach this one's control link at 10.0.0.2:7000.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := member.Run(ctx, member.Config{
		Cluster: "lab",
		Etcd:    []string{"http://10.0.0.1:2379"},
		Listen:  "10.0.0.2:7000",
	}, monitor.Config{})
	if err != nil {
		log.Fatal(err)
	}
}

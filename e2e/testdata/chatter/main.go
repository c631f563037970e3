// chatter is the program of the host-work tests' image: it prints a
// numbered line every -interval, odd numbers to stdout and even ones to
// stderr, each with the run's id (its start time), and exits at once on
// SIGTERM (as PID 1 it must handle that itself).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	interval := flag.Duration("interval", 50*time.Millisecond, "time between lines")
	flag.Parse()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	run := time.Now().UnixNano()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for i := 1; ; i++ {
		if i%2 == 1 {
			fmt.Fprintf(os.Stdout, "out %d %d\n", run, i)
		} else {
			fmt.Fprintf(os.Stderr, "err %d %d\n", run, i)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

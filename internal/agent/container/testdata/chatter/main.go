// chatter is the program of the container tests' image. It prints
// numbered lines, odd ones to stdout and even ones to stderr, one every
// -interval; with -long N it prints one line of N bytes instead and idles.
// It exits at once on SIGTERM (as PID 1 it must handle it itself).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	interval := flag.Duration("interval", 20*time.Millisecond, "time between lines")
	long := flag.Int("long", 0, "print one line of this many bytes, then idle")
	flag.Parse()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if *long > 0 {
		fmt.Println(strings.Repeat("x", *long))
		<-stop
		return
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for i := 1; ; i++ {
		if i%2 == 1 {
			fmt.Fprintf(os.Stdout, "out %d\n", i)
		} else {
			fmt.Fprintf(os.Stderr, "err %d\n", i)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

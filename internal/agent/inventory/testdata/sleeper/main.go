// sleeper is the program of the inventory test's image: it idles until
// it is stopped (as PID 1 it must handle SIGTERM itself).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

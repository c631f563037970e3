package agent

import (
	"fmt"
	"net"
)

// FreeLoopbackPort returns a TCP port free on 127.0.0.1 now, for a
// container or unit about to be published there. Something else may take
// it before it is used: callers that publish on it retry with another
// when the engine says the port is taken.
func FreeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package testlab

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"sync"
	"testing"
)

// ExecResult is the outcome of a command.
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// RunCommand runs cmd, made with exec.CommandContext(ctx, …), and returns
// its output and exit status. A command that cannot start, or that ctx
// ended, fails the test; what names it in that message.
func RunCommand(t testing.TB, ctx context.Context, cmd *exec.Cmd, what string) ExecResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		res.ExitCode = exit.ExitCode()
	default:
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", what, err, res.Stdout, res.Stderr)
	}
	return res
}

// InParallel runs fn(i) for every i in [0, n) in its own goroutine,
// released together so that they race, and waits for all of them: the
// shape of every test of a check-then-act under concurrency.
func InParallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

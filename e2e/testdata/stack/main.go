// stack is the program of the compose tests' web and worker services,
// which share one image. With ROLE=worker it adds 1 to the Redis key
// ticks every 100 ms. Otherwise it serves HTTP on PORT (8080 unless set):
// GET / answers "<VERSION> <GREETING>" after counting the request in
// Redis (500 when Redis does not answer); GET /health answers
// HEALTH_STATUS (200 unless set) once Redis answers PING; POST /put?v=
// stores v under the key data, GET /get answers it; GET /ticks answers
// the worker's count; GET /env?key= answers an environment variable.
// Redis is at REDIS_ADDR (cache:6379 unless set).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// redis is one connection to Redis, dialled again after an error.
type redis struct {
	addr string
	mu   sync.Mutex
	c    net.Conn
	r    *bufio.Reader
}

func (r *redis) do(args ...string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c == nil {
		c, err := net.DialTimeout("tcp", r.addr, 2*time.Second)
		if err != nil {
			return "", err
		}
		r.c, r.r = c, bufio.NewReader(c)
	}
	v, err := r.roundTrip(args)
	if err != nil {
		r.c.Close()
		r.c = nil
	}
	return v, err
}

func (r *redis) roundTrip(args []string) (string, error) {
	_ = r.c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := r.c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := r.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := readFull(r.r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "cache:6379"
	}
	db := &redis{addr: addr}
	if os.Getenv("ROLE") == "worker" {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		t := time.NewTicker(100 * time.Millisecond)
		fmt.Println("worker counting ticks")
		// A failure is logged once until ticks count again, so that a
		// cache being replaced does not fill the log.
		failing := false
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_, err := db.do("INCR", "ticks")
				switch {
				case err != nil && !failing:
					fmt.Fprintln(os.Stderr, "tick:", err, "(not logged again until ticks count)")
				case err == nil && failing:
					fmt.Println("ticks counting again")
				}
				failing = err != nil
			}
		}
	}
	version := os.Getenv("VERSION")
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	health := http.StatusOK
	if s, err := strconv.Atoi(os.Getenv("HEALTH_STATUS")); err == nil {
		health = s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.do("INCR", "hits"); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s %s", version, os.Getenv("GREETING"))
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.do("PING"); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(health)
		fmt.Fprintf(w, "version %s health %d", version, health)
	})
	mux.HandleFunc("POST /put", func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.do("SET", "data", r.URL.Query().Get("v")); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "stored")
	})
	get := func(key string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			v, err := db.do("GET", key)
			if err != nil {
				http.Error(w, "redis: "+err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, v)
		}
	}
	mux.HandleFunc("GET /get", get("data"))
	mux.HandleFunc("GET /ticks", get("ticks"))
	mux.HandleFunc("GET /env", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, os.Getenv(r.URL.Query().Get("key"))) })
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	fmt.Printf("version %s listening on :%s\n", version, port)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

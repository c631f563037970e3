// web is the program of the deploy tests' images: a tiny HTTP server.
// GET / answers "<VERSION> <GREETING>"; GET /health answers HEALTH_STATUS
// (200 unless set); PORT is the port (8080 unless set); with CRASH set it
// exits at once with status 3. With HEALTH_GATE set, GET /health answers
// 503 until a POST /ready, so that a test holds a release in its health
// check for as long as it needs. As PID 1 it handles SIGTERM itself and
// shuts down gracefully. POST /fail makes GET /health answer 500 from then
// on, and POST /recover undoes it, so that a test makes a running
// container fail its health check.
//
// Run as "web digest IN OUT" it writes the SHA-256 of file IN, in
// hexadecimal, to file OUT and exits: a build step of the tests runs it
// on a build secret.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "digest" {
		b, err := os.ReadFile(os.Args[2])
		if err == nil {
			sum := sha256.Sum256(b)
			err = os.WriteFile(os.Args[3], []byte(hex.EncodeToString(sum[:])), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("digest written")
		return
	}
	if os.Getenv("CRASH") != "" {
		fmt.Fprintln(os.Stderr, "crashing as asked")
		os.Exit(3)
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
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", version, os.Getenv("GREETING"))
	})
	var ready atomic.Bool
	ready.Store(os.Getenv("HEALTH_GATE") == "")
	mux.HandleFunc("POST /ready", func(w http.ResponseWriter, r *http.Request) {
		ready.Store(true)
		fmt.Fprint(w, "ready")
	})
	var failing atomic.Bool
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) { failing.Store(true) })
	mux.HandleFunc("POST /recover", func(w http.ResponseWriter, r *http.Request) { failing.Store(false) })
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "failing as asked")
			return
		}
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "waiting for POST /ready")
			return
		}
		w.WriteHeader(health)
		if health >= 400 {
			fmt.Fprintf(w, "unhealthy: version %s is broken", version)
			return
		}
		fmt.Fprint(w, "ok")
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		fmt.Println("shutting down")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	fmt.Printf("version %s listening on :%s\n", version, port)
	fmt.Fprintln(os.Stderr, "ready (stderr)")
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

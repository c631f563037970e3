// svcweb is the web program of the service application tests: it serves
// on 127.0.0.1:$PORT, says which version it is and what its sandbox lets
// it do, and logs a line at start.
//
//	GET /health   200 ok
//	GET /         version=<-version> greeting=<$GREETING>
//	GET /sandbox  JSON: uid, and whether it can write its working
//	              directory, /tmp and /etc
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

func main() {
	version := flag.String("version", "dev", "version to report")
	flag.Parse()
	port := os.Getenv("PORT")
	fmt.Printf("svcweb %s starting on 127.0.0.1:%s\n", *version, port)
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "version=%s greeting=%s", *version, os.Getenv("GREETING"))
	})
	http.HandleFunc("/sandbox", func(w http.ResponseWriter, r *http.Request) {
		canWrite := func(dir string) bool {
			p := filepath.Join(dir, fmt.Sprintf(".svcweb-%d", os.Getpid()))
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				return false
			}
			os.Remove(p)
			return true
		}
		wd, _ := os.Getwd()
		json.NewEncoder(w).Encode(map[string]any{
			"uid": os.Getuid(), "cwd": wd,
			"write_cwd": canWrite("."), "write_tmp": canWrite("/tmp"), "write_etc": canWrite("/etc"),
		})
	})
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

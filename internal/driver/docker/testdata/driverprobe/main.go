// Command driverprobe is the one program in the docker driver's test image
// (FROM scratch, so it is statically linked and needs nothing else). Its
// first argument picks a behaviour the tests observe from outside:
//
//	run            print "ready"; on SIGUSR1 print "usr1"; on SIGTERM print
//	               "got SIGTERM" on stderr and exit 3 (the default)
//	exit CODE      exit with CODE
//	echo OUT ERR   print OUT on stdout and ERR on stderr
//	env NAME...    print NAME=value for each name, then cwd=<working dir>
//	serve PORT     answer HTTP on PORT with "probe"; SIGTERM exits 0
//	alloc MIB      print "ready"; on SIGUSR1 allocate and touch MIB mebibytes,
//	               print "allocated", and wait
//	spew BYTES     print BYTES bytes of 'x' on stdout
//	ids            print "<uid> <gid>" and exit 0
//	get URL        GET URL until it answers (at most 30 s), print the body
//	               and exit 0; exit 1 if it never answers
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"run"}
	}
	switch args[0] {
	case "run":
		run()
	case "exit":
		os.Exit(atoi(arg(args, 1)))
	case "echo":
		fmt.Fprintln(os.Stdout, arg(args, 1))
		fmt.Fprintln(os.Stderr, arg(args, 2))
	case "env":
		for _, name := range args[1:] {
			fmt.Printf("%s=%s\n", name, os.Getenv(name))
		}
		wd, _ := os.Getwd()
		fmt.Printf("cwd=%s\n", wd)
	case "serve":
		serve(arg(args, 1))
	case "alloc":
		alloc(atoi(arg(args, 1)))
	case "spew":
		os.Stdout.WriteString(strings.Repeat("x", atoi(arg(args, 1))))
	case "get":
		get(arg(args, 1))
	case "ids":
		fmt.Printf("%d %d\n", os.Getuid(), os.Getgid())
	default:
		fmt.Fprintf(os.Stderr, "driverprobe: unknown behaviour %q\n", args[0])
		os.Exit(2)
	}
}

func run() {
	// Handlers first, then "ready": a test that saw "ready" may signal.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)
	fmt.Println("ready")
	for s := range sigs {
		if s == syscall.SIGUSR1 {
			fmt.Println("usr1")
			continue
		}
		fmt.Fprintln(os.Stderr, "got SIGTERM")
		os.Exit(3)
	}
}

func serve(port string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		os.Exit(0)
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "probe") })
	fmt.Println("serving on", port)
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(url string) {
	// The server may start after us (they are started together): try
	// until it answers, as a client in a task would.
	var last error
	for range 300 {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Println(string(body))
			os.Exit(0)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, last)
	os.Exit(1)
}

func alloc(mib int) {
	// Allocate only when told: an OOM kill in the first instants of a
	// container can come before the runtime watches for OOM kills, and
	// then the engine never learns of it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	fmt.Println("ready")
	<-sigs
	var keep [][]byte
	for range mib {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	fmt.Println("allocated", len(keep))
	select {}
}

func arg(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	fmt.Fprintf(os.Stderr, "driverprobe %s: missing argument %d\n", args[0], i)
	os.Exit(2)
	return ""
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "driverprobe: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

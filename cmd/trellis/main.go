// Command trellis is the Trellis server, dev mode and command line.
package main

import (
	"context"
	"os"

	"trellis.dev/trellis/internal/cli"
)

func main() {
	os.Exit(execute(context.Background(), os.Args[1:], cli.StdEnv()))
}

package redirect_test

import (
	"fmt"
	"strings"

	"trellis.dev/trellis/internal/redirect"
)

// The rules for an app on port 8080, with the defaults: what the agent
// writes in a mesh task's namespace with redirect.Apply.
func ExampleRules() {
	cfg := redirect.DefaultConfig()
	cfg.AppPorts = []int{8080}
	rules, err := redirect.Rules(cfg, redirect.IPv4)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(rules, "\n"))

	cfg.AppPorts = []int{15000}
	_, err = redirect.Rules(cfg, redirect.IPv4)
	fmt.Println(err)
	// Output:
	// *nat
	// :TRELLIS_INBOUND - [0:0]
	// :TRELLIS_OUTBOUND - [0:0]
	// -A TRELLIS_OUTBOUND -m owner --uid-owner 1337 -j RETURN
	// -A TRELLIS_OUTBOUND -m owner --gid-owner 1337 -j RETURN
	// -A TRELLIS_OUTBOUND -p tcp -d 169.254.169.254/32 -j RETURN
	// -A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 15001
	// -A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND
	// -A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 15000
	// -A PREROUTING -p tcp -m addrtype ! --src-type LOCAL -j TRELLIS_INBOUND
	// COMMIT
	// --app-port: 15000 is the proxy's inbound port (--proxy-inbound-port): the app and the proxy cannot share it
}

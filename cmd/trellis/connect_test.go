package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// --dry-run prints seed 004's rules, with Trellis's chain names.
func TestRedirectTrafficDryRun(t *testing.T) {
	out := mustRun(t, "", "connect", "redirect-traffic", "--app-port", "8080", "--exclude-outbound-port", "22", "--dry-run")
	want := `*nat
:TRELLIS_INBOUND - [0:0]
:TRELLIS_OUTBOUND - [0:0]
-A TRELLIS_OUTBOUND -m owner --uid-owner 1337 -j RETURN
-A TRELLIS_OUTBOUND -m owner --gid-owner 1337 -j RETURN
-A TRELLIS_OUTBOUND -p tcp -m multiport --dports 22 -j RETURN
-A TRELLIS_OUTBOUND -p tcp -d 169.254.169.254/32 -j RETURN
-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 15001
-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND
-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080 -j REDIRECT --to-ports 15000
-A PREROUTING -p tcp -m addrtype ! --src-type LOCAL -j TRELLIS_INBOUND
COMMIT
`
	if out != want {
		t.Fatalf("--dry-run printed\n%s\nwant\n%s", out, want)
	}

	// Every flag reaches the rules; both families are printed, each
	// under the tool that reads it.
	out = mustRun(t, "", "connect", "redirect-traffic", "--dry-run", "--ipv6", "--app-port", "all",
		"--exclude-inbound-port", "22,9901", "--proxy-inbound-port", "20000", "--proxy-outbound-port", "20001",
		"--proxy-uid", "101", "--proxy-gid", "102", "--exclude-uid", "0", "--exclude-outbound-port", "5432",
		"--exclude-outbound-cidr", "10.0.0.0/8,fd00::/8", "--dns-resolver", "10.0.0.2", "--dns-redirect-to", "127.0.0.1:8600")
	for _, line := range []string{
		"# IPv4: iptables-restore --noflush\n*nat\n:TRELLIS_INBOUND - [0:0]\n:TRELLIS_OUTBOUND - [0:0]\n:TRELLIS_DNS - [0:0]\n",
		"-A TRELLIS_DNS -p udp -d 10.0.0.2/32 --dport 53 -j DNAT --to-destination 127.0.0.1:8600\n",
		"-A TRELLIS_OUTBOUND -m owner --uid-owner 101 -j RETURN\n",
		"-A TRELLIS_OUTBOUND -m owner --gid-owner 102 -j RETURN\n",
		"-A TRELLIS_OUTBOUND -m owner --uid-owner 0 -j RETURN\n",
		"-A TRELLIS_OUTBOUND -p tcp -m multiport --dports 5432 -j RETURN\n",
		"-A TRELLIS_OUTBOUND -p tcp -d 10.0.0.0/8 -j RETURN\n",
		"-A TRELLIS_OUTBOUND -p tcp -j REDIRECT --to-ports 20001\n",
		"-A TRELLIS_INBOUND -p tcp -m multiport --dports 22,9901 -j RETURN\n",
		"-A TRELLIS_INBOUND -p tcp -j REDIRECT --to-ports 20000\n",
		"COMMIT\n\n# IPv6: ip6tables-restore --noflush\n*nat\n:TRELLIS_INBOUND - [0:0]\n:TRELLIS_OUTBOUND - [0:0]\n-A",
		"-A TRELLIS_OUTBOUND -p tcp -d fd00::/8 -j RETURN\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("--dry-run lacks %q:\n%s", line, out)
		}
	}
	if strings.Contains(out, "169.254.169.254") {
		t.Errorf("--exclude-outbound-cidr did not replace the default:\n%s", out)
	}
}

func TestRedirectTrafficRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--app-port", "15000"}, "--app-port: 15000 is the proxy's inbound port (--proxy-inbound-port): the app and the proxy cannot share it"},
		{[]string{"--app-port", "8080,http"}, `--app-port: "http" is not a port number, or all`},
		{[]string{"--app-port", "all,8080"}, "--app-port: all redirects every port: give it alone, not with ports 8080"},
		{[]string{"--proxy-outbound-port", "70000"}, "--proxy-outbound-port: 70000 is not a port: use 1 to 65535"},
		{[]string{"--exclude-outbound-port", "ssh"}, `--exclude-outbound-port: "ssh" is not a port number`},
		{[]string{"--exclude-inbound-port", "22"}, "--exclude-inbound-port: only with --app-port all: with a list of app ports, leave the port out of the list"},
		{[]string{"--exclude-uid", "-1"}, "--exclude-uid: -1 is not a user or group id: use 0 to 4294967294"},
		{[]string{"--exclude-outbound-cidr", "10.0.0.0/40"}, `--exclude-outbound-cidr: "10.0.0.0/40" is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address`},
		{[]string{"--exclude-outbound-cidr", "fd00::/8"}, "--exclude-outbound-cidr: fd00::/8 is an IPv6 CIDR, and IPv6 is not redirected: give --ipv6 too, or leave it out"},
		{[]string{"--dns-resolver", "10.0.0.2"}, "--dns-redirect-to: required with --dns-resolver"},
		{[]string{"--remove", "--app-port", "8080"}, "--remove deletes every rule this command wrote: give it only --netns, not --app-port"},
		{[]string{"--remove", "--dry-run"}, "--remove deletes every rule this command wrote: give it only --netns, not --dry-run"},
		{[]string{"extra"}, `unknown command "extra" for "trellis connect redirect-traffic"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Without --dry-run: a refusal comes before anything is written.
			code, out, errOut := run(t, "", nil, append([]string{"connect", "redirect-traffic"}, tc.args...)...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "Error: "+tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tc.want)
			}
		})
	}
}

// The command in a real namespace: applied, applied again, removed.
func TestRedirectTrafficInANamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates a network namespace and writes iptables rules")
	}
	for _, tool := range []string{"ip", "iptables-restore", "iptables-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (apt-get install iproute2 iptables)", tool)
		}
	}
	name := fmt.Sprintf("trellis-cli-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() }) //nolint:errcheck // best effort
	netns := "/run/netns/" + name
	nat := func() string {
		out, err := exec.Command("ip", "netns", "exec", name, "iptables-save", "-t", "nat").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables-save: %v: %s", err, out)
		}
		return string(out)
	}

	for range 2 {
		out := mustRun(t, "", "connect", "redirect-traffic", "--netns", netns, "--app-port", "8080,9090")
		if want := "Redirected (IPv4): outbound TCP to port 15001, inbound TCP to ports 8080,9090 to port 15000.\n"; out != want {
			t.Fatalf("printed %q, want %q", out, want)
		}
		table := nat()
		for _, want := range []string{
			"-A OUTPUT -p tcp -m addrtype ! --dst-type LOCAL -j TRELLIS_OUTBOUND\n",
			"-A PREROUTING -p tcp -m addrtype ! --src-type LOCAL -j TRELLIS_INBOUND\n",
			"-A TRELLIS_INBOUND -p tcp -m multiport --dports 8080,9090 -j REDIRECT --to-ports 15000\n",
		} {
			if strings.Count(table, want) != 1 {
				t.Fatalf("the nat table has not one %q:\n%s", want, table)
			}
		}
	}
	if out := mustRun(t, "", "connect", "redirect-traffic", "--netns", netns, "--remove"); out != "Removed the redirection (IPv4).\n" {
		t.Fatalf("--remove printed %q", out)
	}
	if table := nat(); strings.Contains(table, "TRELLIS") {
		t.Fatalf("left after --remove:\n%s", table)
	}
	if out := mustRun(t, "", "connect", "redirect-traffic", "--netns", netns, "--remove"); out != "No redirection to remove.\n" {
		t.Fatalf("a second --remove printed %q", out)
	}

	code, _, errOut := run(t, "", nil, "connect", "redirect-traffic", "--netns", "/run/netns/"+name+"-none")
	if want := "Error: --netns: open /run/netns/" + name + "-none: no such file or directory\n"; code != 1 || errOut != want {
		t.Fatalf("a missing namespace: exit %d, %q; want %q", code, errOut, want)
	}
}

package redirect

import (
	"errors"
	"os/exec"
	"testing"
)

// The tools' refusals, as they print them, read as one message naming
// the input line they refused when they say which.
func TestToolError(t *testing.T) {
	input := []string{"*nat", ":TRELLIS_OUTBOUND - [0:0]", "-A TRELLIS_OUTBOUND -j NOPE", "COMMIT"}
	exit := errors.New("exit status 2")
	for _, tc := range []struct {
		name, stderr, want, line string
	}{
		{"legacy, at a line",
			"iptables-restore v1.8.9 (legacy): Couldn't load target `NOPE':No such file or directory\n\nError occurred at line: 3\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n",
			"iptables-legacy-restore: iptables-restore v1.8.9 (legacy): Couldn't load target `NOPE':No such file or directory (at \"-A TRELLIS_OUTBOUND -j NOPE\")",
			"-A TRELLIS_OUTBOUND -j NOPE"},
		{"nf_tables, at the COMMIT",
			"iptables-restore v1.8.9 (nf_tables): Chain 'NOPE' does not exist\nError occurred at line: 4\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n",
			"iptables-legacy-restore: iptables-restore v1.8.9 (nf_tables): Chain 'NOPE' does not exist", ""},
		{"nf_tables, refused by the kernel",
			"iptables-nft-restore v1.8.9 (nf_tables): \nline 3: RULE_APPEND failed (Invalid argument): rule in chain TRELLIS_OUTBOUND\n",
			"iptables-legacy-restore: iptables-nft-restore v1.8.9 (nf_tables): line 3: RULE_APPEND failed (Invalid argument): rule in chain TRELLIS_OUTBOUND (at \"-A TRELLIS_OUTBOUND -j NOPE\")",
			"-A TRELLIS_OUTBOUND -j NOPE"},
		{"nothing said", "", "iptables-legacy-restore: exit status 2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := toolError("iptables-legacy-restore", exit, tc.stderr, input)
			var te *ToolError
			if !errors.As(err, &te) || te.Line != tc.line || err.Error() != tc.want || !errors.Is(err, ErrTool) || !errors.Is(err, exit) {
				t.Fatalf("got %q (line %q), want %q (line %q)", err, te.Line, tc.want, tc.line)
			}
		})
	}
	err := toolError("iptables-restore", exec.ErrNotFound, "", nil)
	if want := "iptables-restore: not found: install the iptables package (apt-get install iptables)"; err.Error() != want {
		t.Fatalf("missing tool: %q, want %q", err, want)
	}
}

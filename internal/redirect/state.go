package redirect

import (
	"slices"
	"strings"
)

// state is what of Trellis's rules a nat table already holds, read from
// iptables-save: the chains, and the rules of other chains that jump to
// them.
type state struct {
	chains []string // ours that exist, in the order of chains
	jumps  []string // "-A OUTPUT ... -j TRELLIS_OUTBOUND", as saved
}

// parseSave reads the nat table of an iptables-save output. Rules are
// kept as the tool printed them: iptables-restore reads its own output
// back, so "-D" and the rest of a saved "-A" line delete exactly that
// rule, whichever backend (nft or legacy) printed it.
func parseSave(out string) state {
	var st state
	inNat := false
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "*"):
			inNat = line == "*nat"
		case !inNat:
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if isOurChain(name) {
				st.chains = append(st.chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			if isOurChain(fields[1]) {
				continue
			}
			if isOurChain(jumpTarget(fields)) {
				st.jumps = append(st.jumps, line)
			}
		}
	}
	// Declared in our order, whatever order the tool printed them in.
	var ordered []string
	for _, c := range chains {
		for _, have := range st.chains {
			if have == c {
				ordered = append(ordered, c)
			}
		}
	}
	st.chains = ordered
	return st
}

// jumpTarget is the chain a saved rule's fields jump or go to, or "".
func jumpTarget(fields []string) string {
	for i := 2; i+1 < len(fields); i++ {
		if fields[i] == "-j" || fields[i] == "-g" || fields[i] == "--jump" || fields[i] == "--goto" {
			return fields[i+1]
		}
	}
	return ""
}

// only is the part of st that concerns chain: the chain, if it exists,
// and the jumps to it.
func (st state) only(chain string) state {
	var out state
	if slices.Contains(st.chains, chain) {
		out.chains = []string{chain}
	}
	for _, j := range st.jumps {
		if jumpTarget(strings.Fields(j)) == chain {
			out.jumps = append(out.jumps, j)
		}
	}
	return out
}

func (st state) empty() bool { return len(st.chains) == 0 && len(st.jumps) == 0 }

// applyInput is the restore input that makes a nat table in state st hold
// exactly rules (from Rules): a chain declared in rules is flushed if it
// exists (iptables-restore --noflush does so for a declared chain); every
// jump to our chains already there is deleted, so that the rules' own
// jumps are the only ones; a chain of ours that rules no longer use is
// emptied and deleted. All in one input, so one transaction.
func applyInput(rules []string, st state) []string {
	declared := map[string]bool{}
	for _, line := range rules {
		if strings.HasPrefix(line, ":") {
			name, _, _ := strings.Cut(line[1:], " ")
			declared[name] = true
		}
	}
	out := []string{rules[0]} // *nat
	body := rules[1:]
	for len(body) > 0 && strings.HasPrefix(body[0], ":") {
		out = append(out, body[0])
		body = body[1:]
	}
	out = append(out, deleteJumps(st)...)
	for _, c := range st.chains {
		if !declared[c] {
			out = append(out, "-F "+c, "-X "+c)
		}
	}
	return append(out, body...)
}

// removeInput is the restore input that deletes our jumps and chains, or
// nil when the table has none.
func removeInput(st state) []string {
	if st.empty() {
		return nil
	}
	out := append([]string{"*nat"}, deleteJumps(st)...)
	for _, c := range st.chains {
		out = append(out, "-F "+c, "-X "+c)
	}
	return append(out, "COMMIT")
}

func deleteJumps(st state) []string {
	out := make([]string, len(st.jumps))
	for i, j := range st.jumps {
		out[i] = "-D " + strings.TrimPrefix(j, "-A ")
	}
	return out
}

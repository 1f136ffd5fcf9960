package tasks

import (
	"sort"

	"trellis.dev/trellis/internal/orchestrator"
)

// Family is a task definition family in a namespace: what the agent's
// leaf cache names a service by (not yet by a mesh block's service).
type Family struct {
	Namespace, Family string
}

// Families lists the families of the tasks the manager holds (running,
// starting or stopping; not those it is done with), each once, sorted.
func (m *Manager) Families() []Family {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[Family]bool{}
	var out []Family
	for _, e := range m.tasks {
		family, _, err := orchestrator.ParseTaskDefinitionRef(e.stored.GetTaskDefinition())
		if err != nil {
			continue
		}
		f := Family{Namespace: e.namespace, Family: family}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Family < out[j].Family
	})
	return out
}

// Changed is closed at the next change of the manager's tasks.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

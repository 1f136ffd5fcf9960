package tasks

import (
	"sort"

	"trellis.dev/trellis/internal/orchestrator"
)

// Family is a service of the agent's tasks in a namespace: what the
// agent's leaf cache names a leaf by (Services).
type Family struct {
	Namespace, Family string
}

// Services lists the services of the tasks the manager holds (as
// Families), each once, sorted: a mesh task's is its mesh block's service
// (orchestrator.MeshService), any other task's (and a task whose
// definition is not read yet) its family. The agent's leaf cache holds a
// leaf for each.
func (m *Manager) Services() []Family {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[Family]bool{}
	var out []Family
	for _, e := range m.tasks {
		var svc string
		if e.def.GetMesh() != nil {
			svc = orchestrator.MeshService(e.def)
		} else {
			family, _, err := orchestrator.ParseTaskDefinitionRef(e.stored.GetTaskDefinition())
			if err != nil {
				continue
			}
			svc = family
		}
		f := Family{Namespace: e.namespace, Family: svc}
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

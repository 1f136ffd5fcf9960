package catalog

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// MutateService fills a Service's defaults: protocol tcp.
func MutateService(res *pbresource.Resource) error {
	return resource.MutateData(res, func(s *pbcatalog.Service) {
		if s.Protocol == "" {
			s.Protocol = ProtocolTCP
		}
	})
}

// ValidateService is the Validate hook of catalog/v1/Service.
func ValidateService(res *pbresource.Resource) error {
	s, err := resource.DecodeData[*pbcatalog.Service](res)
	if err != nil {
		return err
	}
	if !slices.Contains(Protocols, s.GetProtocol()) {
		return resource.NewFieldError("data.protocol", "%q is not one of %s", s.GetProtocol(), strings.Join(Protocols, ", "))
	}
	seen := map[string]bool{}
	for i, p := range s.GetPorts() {
		field := fmt.Sprintf("data.ports[%d]", i)
		if err := resource.ValidateName(field+".name", p.GetName()); err != nil {
			return err
		}
		if seen[p.GetName()] {
			return resource.NewFieldError(field+".name", "%q names a port already named", p.GetName())
		}
		seen[p.GetName()] = true
		if err := validatePort(field+".port", p.GetPort()); err != nil {
			return err
		}
	}
	return nil
}

// MutateServiceInstance fills a ServiceInstance's defaults: a proxy in
// local mode.
func MutateServiceInstance(res *pbresource.Resource) error {
	return resource.MutateData(res, func(si *pbcatalog.ServiceInstance) {
		if si.Proxy != nil && si.Proxy.Mode == "" {
			si.Proxy.Mode = ProxyModeLocal
		}
	})
}

// ValidateServiceInstance is the Validate hook of
// catalog/v1/ServiceInstance. That the task and instance it names exist is
// not its to say (it sees one resource): the operation that registers an
// instance checks it.
func ValidateServiceInstance(res *pbresource.Resource) error {
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](res)
	if err != nil {
		return err
	}
	if err := resource.ValidateName("data.service", si.GetService()); err != nil {
		return err
	}
	if err := ValidateAddress("data.address", si.GetAddress()); err != nil {
		return err
	}
	if err := validatePort("data.port", si.GetPort()); err != nil {
		return err
	}
	if p := si.GetProxy(); p != nil {
		if err := validatePort("data.proxy.port", p.GetPort()); err != nil {
			return err
		}
		if p.GetPort() == si.GetPort() {
			return resource.NewFieldError("data.proxy.port", "is %d, the instance's own port: the proxy listens on a port of its own", p.GetPort())
		}
		switch p.GetMode() {
		case ProxyModeLocal, ProxyModeTransparent:
		default:
			return resource.NewFieldError("data.proxy.mode", "%q is not %s or %s", p.GetMode(), ProxyModeLocal, ProxyModeTransparent)
		}
	}
	if err := validatePlacement(res, si); err != nil {
		return err
	}
	if err := ValidateTags("data.tags", si.GetTags()); err != nil {
		return err
	}
	if err := ValidateMeta("data.meta", si.GetMeta()); err != nil {
		return err
	}
	return validateCheckDefinitions(si)
}

// validatePlacement checks where an instance runs: on a task (instance and
// task both set, owned by that task) or outside Trellis (neither).
func validatePlacement(res *pbresource.Resource, si *pbcatalog.ServiceInstance) error {
	instance, task := si.GetInstance(), si.GetTask()
	switch {
	case instance == "" && task == "":
		return nil
	case task == "":
		return resource.NewFieldError("data.task", "is required with data.instance: an instance of a service runs on an Instance as a Task, or outside Trellis with neither")
	case instance == "":
		return resource.NewFieldError("data.instance", "is required with data.task: the Instance task %s runs on, whose agent reports its checks", task)
	}
	if err := resource.ValidateName("data.instance", instance); err != nil {
		return err
	}
	if err := resource.ValidateName("data.task", task); err != nil {
		return err
	}
	// Deleted with its task: the owner is the task it names.
	owner := res.GetOwner()
	if owner == nil {
		return resource.NewFieldError("owner", "is required: an instance of task %s is owned by that task (orchestrator/v1/Task %s, with its uid), so that it is deleted with it", task, task)
	}
	if !proto.Equal(owner.GetType(), orchestrator.TaskType) || owner.GetName() != task || namespaceOf(owner) != namespaceOf(res.GetId()) {
		return resource.NewFieldError("owner", "is %s; an instance of task %s is owned by that task, orchestrator/v1/Task %s of namespace %s", ids.String(owner), task, task, namespaceOf(res.GetId()))
	}
	return nil
}

func namespaceOf(id *pbresource.ID) string {
	if ns := id.GetTenancy().GetNamespace(); ns != "" {
		return ns
	}
	return resource.DefaultNamespace
}

// ValidateServiceInstanceOwner is the ValidateOwner hook of
// catalog/v1/ServiceInstance: an instance of a task is on the instance
// (machine) that task is placed on. That instance's agent alone writes its
// checks (AgentChecksStatusKey), so an instance that named another would
// let that one's agent speak for the task. The resource service calls it
// when the instance is created, with its owner as stored (a task that does
// not exist refuses the create); a task's instance, like the instance's,
// never changes after.
func ValidateServiceInstanceOwner(owner, res *pbresource.Resource) error {
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](res)
	if err != nil || si.GetTask() == "" {
		return err
	}
	task, err := resource.DecodeData[*pborch.Task](owner)
	if err != nil {
		return resource.NewFieldError("owner", "is not a task this server can read: %v", err)
	}
	if task.GetInstance() != si.GetInstance() {
		return resource.NewFieldError("data.instance", "is %q, but task %s runs on instance %q: an instance of a task is on its task's instance, whose agent alone reports its checks", si.GetInstance(), si.GetTask(), task.GetInstance())
	}
	return nil
}

// validateCheckDefinitions checks an instance's check definitions against
// where it runs: an instance of a task has "<task>" and
// "<task>/<container>" checks, which its agent reports; one from outside
// has TTL checks.
func validateCheckDefinitions(si *pbcatalog.ServiceInstance) error {
	checks := si.GetChecks()
	if len(checks) > MaxChecks {
		return resource.NewFieldError("data.checks", "has %d checks, over the limit of %d", len(checks), MaxChecks)
	}
	task := si.GetTask()
	seen := map[string]bool{}
	for i, c := range checks {
		field := fmt.Sprintf("data.checks[%d]", i)
		name := c.GetName()
		if err := ValidateCheckName(field+".name", name); err != nil {
			return err
		}
		if seen[name] {
			return resource.NewFieldError(field+".name", "%q names a check already defined", name)
		}
		seen[name] = true
		if task != "" {
			container, ok := strings.CutPrefix(name, task+"/")
			if name != task && (!ok || !resource.IsDNSLabel(container)) {
				return resource.NewFieldError(field+".name", "%q is not %q or %q/<container>: an instance of a task has the task's checks", name, task, task)
			}
			if c.GetTtl() != nil {
				return resource.NewFieldError(field+".ttl", "is set: the checks of an instance of a task are reported by its agent, not refreshed (a TTL check is for an instance registered from outside)")
			}
			continue
		}
		if c.GetTtl() == nil {
			return resource.NewFieldError(field+".ttl", "is required: an instance registered from outside Trellis has TTL checks, refreshed before the ttl runs out")
		}
		if err := c.GetTtl().CheckValid(); err != nil {
			return resource.NewFieldError(field+".ttl", "%v", err)
		}
		if ttl := c.GetTtl().AsDuration(); ttl < MinTTL || ttl > MaxTTL {
			return resource.NewFieldError(field+".ttl", "is %s, outside %s to %s", ttl, MinTTL, MaxTTL)
		}
	}
	return nil
}

// ValidateServiceInstanceUpdate is the ValidateUpdate hook of
// catalog/v1/ServiceInstance: which service it is of, and which task and
// instance it runs on, never change. Whose agent writes its checks thus
// never moves: an agent that may write the data cannot make another
// instance's entry its own.
func ValidateServiceInstanceUpdate(stored, next *pbresource.Resource) error {
	old, err := resource.DecodeData[*pbcatalog.ServiceInstance](stored)
	if err != nil {
		return nil // a stored one that does not decode: let Validate speak for next
	}
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](next)
	if err != nil {
		return err
	}
	for _, f := range []struct{ field, was, now string }{
		{"data.service", old.GetService(), si.GetService()},
		{"data.instance", old.GetInstance(), si.GetInstance()},
		{"data.task", old.GetTask(), si.GetTask()},
	} {
		if f.was != f.now {
			return resource.NewFieldError(f.field, "cannot change from %q to %q: register a new service instance instead", f.was, f.now)
		}
	}
	return nil
}

// ValidateChecksStatus checks a ChecksStatus, the payload of a
// ServiceInstance's status keys (the service reports its fields under
// status.data). Which checks it may name is the instance's data, which a
// status payload's check does not see: HealthOf reads only the defined
// ones.
func ValidateChecksStatus(m proto.Message) error {
	st, ok := m.(*pbcatalog.ChecksStatus)
	if !ok {
		return resource.NewFieldError("", "is not a ChecksStatus")
	}
	if len(st.GetChecks()) > MaxChecks {
		return resource.NewFieldError("checks", "has %d checks, over the limit of %d", len(st.GetChecks()), MaxChecks)
	}
	seen := map[string]bool{}
	for i, c := range st.GetChecks() {
		field := fmt.Sprintf("checks[%d]", i)
		if err := ValidateCheckName(field+".name", c.GetName()); err != nil {
			return err
		}
		if seen[c.GetName()] {
			return resource.NewFieldError(field+".name", "%q is reported twice", c.GetName())
		}
		seen[c.GetName()] = true
		if !slices.Contains(CheckStatuses, c.GetStatus()) {
			return resource.NewFieldError(field+".status", "%q is not one of %s", c.GetStatus(), strings.Join(CheckStatuses, ", "))
		}
		if len(c.GetOutput()) > MaxCheckOutputLength {
			return resource.NewFieldError(field+".output", "is %d bytes, over the limit of %d", len(c.GetOutput()), MaxCheckOutputLength)
		}
		if !utf8.ValidString(c.GetOutput()) {
			return resource.NewFieldError(field+".output", "is not valid UTF-8")
		}
	}
	if want := Aggregate(st.GetChecks()); st.GetHealth() != want {
		return resource.NewFieldError("health", "is %q; the aggregate of the checks is %q (catalog.Aggregate)", st.GetHealth(), want)
	}
	if st.GetReportedAt() == nil {
		return resource.NewFieldError("reported_at", "is required")
	}
	return nil
}

func validatePort(field string, port uint32) error {
	if port < 1 || port > 65535 {
		return resource.NewFieldError(field, "is %d, outside 1 to 65535", port)
	}
	return nil
}

// ValidateAddress checks an instance's address: an IP address (no zone)
// or a hostname (labels of letters, digits and '-', at most 253
// characters).
func ValidateAddress(field, addr string) error {
	if addr == "" {
		return resource.NewFieldError(field, "is required")
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		if ip.Zone() != "" {
			return resource.NewFieldError(field, "%q has a zone: give an address every peer can reach", addr)
		}
		return nil
	}
	if !isHostname(addr) {
		return resource.NewFieldError(field, "%q is neither an IP address nor a hostname (labels of letters, digits and '-', joined by dots, at most %d characters)", addr, MaxAddressLength)
	}
	return nil
}

func isHostname(s string) bool {
	if len(s) > MaxAddressLength {
		return false
	}
	allDigits := true
	for _, label := range strings.Split(s, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
				allDigits = false
			case c >= '0' && c <= '9':
			default:
				return false
			}
		}
	}
	// "1.2.3" parses as no IP; as a name of digits alone it is a mistake.
	return !allDigits
}

// ValidateTags checks an instance's tags: at most MaxTags, each 1 to
// MaxTagLength bytes of printable characters without spaces, each once.
func ValidateTags(field string, tags []string) error {
	if len(tags) > MaxTags {
		return resource.NewFieldError(field, "has %d tags, over the limit of %d", len(tags), MaxTags)
	}
	seen := map[string]bool{}
	for i, tag := range tags {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case tag == "":
			return resource.NewFieldError(f, "is empty")
		case len(tag) > MaxTagLength:
			return resource.NewFieldError(f, "is %d bytes, over the limit of %d", len(tag), MaxTagLength)
		case !utf8.ValidString(tag) || strings.ContainsFunc(tag, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
			return resource.NewFieldError(f, "%q holds a space or a character that does not print", tag)
		case seen[tag]:
			return resource.NewFieldError(f, "%q is given twice", tag)
		}
		seen[tag] = true
	}
	return nil
}

// ValidateMeta checks an instance's meta: at most MaxMetaEntries keys of
// 1 to MaxMetaKeyLength letters, digits, '_' and '-', each value at most
// MaxMetaValueLength bytes of UTF-8.
func ValidateMeta(field string, meta map[string]string) error {
	if len(meta) > MaxMetaEntries {
		return resource.NewFieldError(field, "has %d keys, over the limit of %d", len(meta), MaxMetaEntries)
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		f := fmt.Sprintf("%s[%q]", field, k)
		if k == "" || len(k) > MaxMetaKeyLength || strings.ContainsFunc(k, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}) {
			return resource.NewFieldError(f, "is not a valid key: 1 to %d letters, digits, '_' or '-'", MaxMetaKeyLength)
		}
		v := meta[k]
		if len(v) > MaxMetaValueLength {
			return resource.NewFieldError(f, "is %d bytes, over the limit of %d", len(v), MaxMetaValueLength)
		}
		if !utf8.ValidString(v) {
			return resource.NewFieldError(f, "is not valid UTF-8")
		}
	}
	return nil
}

// ValidateCheckName checks the form of a check's name: 1 to
// MaxCheckNameLength letters, digits and '-', '_', '.', ':' or '/'.
func ValidateCheckName(field, name string) error {
	if name == "" {
		return resource.NewFieldError(field, "is required")
	}
	if len(name) > MaxCheckNameLength || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/", r))
	}) {
		return resource.NewFieldError(field, "%q is not a valid check name: 1 to %d letters, digits, '-', '_', '.', ':' or '/'", name, MaxCheckNameLength)
	}
	return nil
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const dbInstances = `type: catalog/v1/ServiceInstance
name: db-1
data: {service: db, address: 10.0.0.9, port: 5432, tags: [primary], checks: [{name: alive, ttl: 30s}, {name: disk, ttl: 60s}]}
---
type: catalog/v1/ServiceInstance
name: db-2
data: {service: db, address: 10.0.0.10, port: 5432, tags: [replica], checks: [{name: alive, ttl: 30s}]}
`

// trellis service against a real dev: register instances from outside
// Trellis (their service created), list and show them with their health,
// refresh their TTL checks, deregister; bad input is refused by name with
// nothing written.
func TestServiceCommands(t *testing.T) {
	addr := startDev(t, "-instances", "0")
	expect := expecter(t, addr)

	expect(0, dbInstances, "Service default/db created (protocol tcp).", "service", "register", "-f", "-")
	expect(0, "", "db        tcp        no     2           0         0         2", "service", "list")
	expect(0, "", "db-1       10.0.0.9:5432    outside Trellis   critical", "service", "show", "db")

	expect(0, "", "Check alive of default/db-1 is passing; the instance is critical.", "service", "check", "pass", "db-1", "alive")
	expect(0, "", "Check disk of default/db-1 is warning; the instance is warning.", "service", "check", "warn", "db-1", "disk", "--note", "90% full")
	expect(0, "", "Check alive of default/db-2 is passing; the instance is passing.", "service", "check", "pass", "db-2", "alive")
	expect(0, "", "db        tcp        no     2           1         1         0", "service", "list")
	show := expect(0, "", "disk    ttl    warning   90% full", "service", "show", "db")
	if !strings.Contains(show, "db-2       10.0.0.10:5432   outside Trellis   passing   replica") {
		t.Fatalf("show db:\n%s", show)
	}
	var view struct {
		Instances []struct {
			Name, Health string
		}
	}
	if err := json.Unmarshal([]byte(expect(0, "", "", "service", "show", "db", "-o", "json")), &view); err != nil || len(view.Instances) != 2 || view.Instances[0].Health != "warning" {
		t.Fatalf("show -o json: %+v, %v", view, err)
	}

	// Bad input, refused by name; nothing changes.
	before := expect(0, "", "", "service", "show", "db", "-o", "json")
	expect(1, "", `check "nope": no such check`, "service", "check", "fail", "db-1", "nope")
	expect(2, "", `pass|warn|fail: "ok" is none of them`, "service", "check", "ok", "db-1", "alive")
	expect(1, "", "not found", "service", "check", "pass", "db-9", "alive")
	expect(1, "{type: core/v1/Namespace, name: x}", "type: core/v1/Namespace is not the catalog's", "service", "register", "-f", "-")
	expect(1, "{type: catalog/v1/ServiceInstance, name: db-3, data: {service: db, address: 10.0.0.11, port: 0, checks: [{name: alive, ttl: 30s}]}}", "data.port: is 0, outside 1 to 65535", "service", "register", "-f", "-")
	expect(1, "", "no such service", "service", "show", "nope")
	if after := expect(0, "", "", "service", "show", "db", "-o", "json"); after != before {
		t.Fatalf("a refused command changed the service:\n%s\nthen\n%s", before, after)
	}

	expect(0, "", "Instance default/db-2 of service db deregistered.", "service", "deregister", "db-2")
	expect(0, "", "db        tcp        no     1           0         1         0", "service", "list")
}

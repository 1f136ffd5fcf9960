package cli

import (
	"sigs.k8s.io/yaml"

	"trellis.dev/trellis/internal/client"
)

func yamlToJSON(b []byte) ([]byte, error) { return yaml.YAMLToJSON(b) }

func clientSpec(name string) *client.EnvironmentSpec { return &client.EnvironmentSpec{Name: name} }

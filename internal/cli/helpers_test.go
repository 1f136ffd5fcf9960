package cli

import "sigs.k8s.io/yaml"

func yamlToJSON(b []byte) ([]byte, error) { return yaml.YAMLToJSON(b) }

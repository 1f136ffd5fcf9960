// Package caroots is what the Connect CA's benchmark commands share to
// read the roots a cluster publishes.
package caroots

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/testcluster"
)

var client = &http.Client{Timeout: 5 * time.Second}

// Agreed reads GET /v1/ca/roots from every member and returns the answer
// when they all name the same active root.
func Agreed(members []*testcluster.Member) (*camodule.RootsBody, error) {
	var first *camodule.RootsBody
	for _, m := range members {
		resp, err := client.Get("http://" + m.HTTPAddr + "/v1/ca/roots")
		if err != nil {
			return nil, err
		}
		var body camodule.RootsBody
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: /v1/ca/roots: %w", m.Name, err)
		case resp.StatusCode != http.StatusOK:
			return nil, fmt.Errorf("%s: /v1/ca/roots: %s", m.Name, resp.Status)
		case body.ActiveRootID == "" || len(body.Roots) == 0:
			return nil, fmt.Errorf("%s: no active root yet", m.Name)
		case first != nil && body.ActiveRootID != first.ActiveRootID:
			return nil, errors.New("the servers name different active roots")
		}
		if first == nil {
			first = &body
		}
	}
	return first, nil
}

package orchestrator

import (
	"fmt"
	"strconv"
	"strings"

	"trellis.dev/trellis/internal/resource"
)

// MaxFamilyLength leaves room in a 63-character resource name for "-" and
// a revision of up to 9 digits.
const MaxFamilyLength = 53

// TaskDefinitionName is the resource name of family:revision. Families
// are DNS labels and revisions digits, so the last "-" always separates
// them and the mapping is one to one.
func TaskDefinitionName(family string, revision int64) string {
	return family + "-" + strconv.FormatInt(revision, 10)
}

// TaskDefinitionRef is "family:revision", the way people name one.
func TaskDefinitionRef(family string, revision int64) string {
	return family + ":" + strconv.FormatInt(revision, 10)
}

// ParseTaskDefinitionRef parses "family:revision". A bare "family" gives
// revision 0, which callers read as "the latest".
func ParseTaskDefinitionRef(ref string) (family string, revision int64, err error) {
	family, rev, hasRev := strings.Cut(ref, ":")
	if err := ValidateFamily("family", family); err != nil {
		return "", 0, fmt.Errorf("%q is not family:revision: %w", ref, err)
	}
	if !hasRev {
		return family, 0, nil
	}
	revision, err = strconv.ParseInt(rev, 10, 64)
	if err != nil || revision < 1 {
		return "", 0, fmt.Errorf("%q is not family:revision: the revision must be a whole number from 1", ref)
	}
	return family, revision, nil
}

// ParseTaskDefinitionName splits a TaskDefinition resource name back
// into family and revision.
func ParseTaskDefinitionName(name string) (family string, revision int64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	revision, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || revision < 1 {
		return "", 0, false
	}
	return name[:i], revision, true
}

// ValidateFamily checks a task definition family: a DNS label of at most
// MaxFamilyLength characters.
func ValidateFamily(field, family string) error {
	if err := resource.ValidateName(field, family); err != nil {
		return err
	}
	if len(family) > MaxFamilyLength {
		return resource.NewFieldError(field, "%q is %d characters long, over the limit of %d", family, len(family), MaxFamilyLength)
	}
	return nil
}

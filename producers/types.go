package producers

import (
	"fmt"
	"strings"

	"github.com/harnessflow/harnessflow/schemas"
)

// ProducerTypes are the event types a producer sends (docs/design.md §3's raw
// events): what an agent, a harness or an importer observes. Every other
// type (labeled_sample, round_metrics, rejected, checkpoint_published, and
// any type added later) is derived: the pipeline writes it, and the SDKs, the
// gateway and `harnessflow produce` refuse it (WithInternalTypes lifts that
// for tests and repair).
var ProducerTypes = []schemas.Type{
	schemas.TypeCampaignDeclared, schemas.TypeCellStarted, schemas.TypeTaskAttempt, schemas.TypeSkillEvent,
	schemas.TypeHarnessUpdate, schemas.TypeAdherenceJudgment, schemas.TypeCellFinished,
}

// IsProducerType reports whether t is one of ProducerTypes.
func IsProducerType(t schemas.Type) bool {
	for _, p := range ProducerTypes {
		if t == p {
			return true
		}
	}
	return false
}

// CheckProducerType returns nil for a producer type and otherwise an error
// wrapping ErrInternalType that names t and the types a producer may send.
func CheckProducerType(t schemas.Type) error {
	if IsProducerType(t) {
		return nil
	}
	names := make([]string, len(ProducerTypes))
	for i, p := range ProducerTypes {
		names[i] = string(p)
	}
	return fmt.Errorf("%w: %s events are written by the pipeline itself, not by producers; send one of %s",
		ErrInternalType, t, strings.Join(names, ", "))
}

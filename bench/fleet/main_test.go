package fleet

import (
	"testing"

	"github.com/harnessflow/harnessflow/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

//go:build !unix

package proc

import (
	"fmt"
	"runtime"
)

func setNice(n int) error {
	return fmt.Errorf("set nice %d: not supported on %s (use 0)", n, runtime.GOOS)
}

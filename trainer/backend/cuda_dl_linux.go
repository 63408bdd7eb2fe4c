package backend

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

// dlopenFirst opens the first library of names that loads and returns its
// handle and name; the error lists why each failed.
func dlopenFirst(names []string) (uintptr, string, error) {
	var errs []string
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", errors.New(strings.Join(errs, "; "))
}

// bindFirst points fptr at the first of names that the library exports.
// Unlike purego.RegisterLibFunc it returns an error instead of panicking.
func bindFirst(lib uintptr, fptr any, names ...string) error {
	for _, n := range names {
		sym, err := purego.Dlsym(lib, n)
		if err == nil && sym != 0 {
			purego.RegisterFunc(fptr, sym)
			return nil
		}
	}
	return fmt.Errorf("symbol %s not found", strings.Join(names, " or "))
}

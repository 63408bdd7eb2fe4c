//go:build !linux

package backend

import "errors"

// errCUDAPlatform explains why no CUDA library is looked for on this OS.
var errCUDAPlatform = errors.New("the CUDA backend is built for linux only")

// dlopenFirst fails: the backend loads the CUDA libraries on linux only.
func dlopenFirst([]string) (uintptr, string, error) { return 0, "", errCUDAPlatform }

// bindFirst fails: the backend loads the CUDA libraries on linux only.
func bindFirst(uintptr, any, ...string) error { return errCUDAPlatform }

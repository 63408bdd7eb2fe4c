// Package composetest brings docker-compose.yml and docker-compose.cluster.yml
// up under a real Docker engine, with the stand-ins of
// infra/compose/stand-ins.yml for the images no registry serves here, and
// sends a campaign through them (compose_test.go, build tag composetest).
//
// Run it with `make compose-test` (infra/scripts/compose-test.sh), which
// starts a dockerd of its own, makes the local base images and stops the
// daemon by its pid at the end. The package has no code of its own.
package composetest

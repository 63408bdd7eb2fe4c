package aevolve

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/harnessflow/harnessflow/schemas"
)

// Config configures an import. Zero fields take the defaults.
type Config struct {
	// Dir is a cell directory or a tree holding cell directories. Required.
	Dir string
	// Campaign is the campaign id. Default: the base name of Dir.
	Campaign string
	// Project is the envelope's project. Default: "default".
	Project string
	// AnchorAgents and AnchorEvolvers are declared with the campaign.
	// Default: DefaultAnchors.
	AnchorAgents, AnchorEvolvers []string
	// Git is the git executable. Default: "git" (searched on PATH).
	Git string
	// MaxFileBytes caps the bytes read from one file of a run directory
	// (results, observations, trajectories, reports); a larger file is
	// refused and reported, not read. A git workspace's object store may
	// hold up to 16 times as much. Default: DefaultMaxFileBytes.
	MaxFileBytes int64
}

// DefaultMaxFileBytes is the default Config.MaxFileBytes, 64 MiB: far above
// the result files of a paper-scale run (kilobytes to a few megabytes), far
// below what would exhaust the importer's memory.
const DefaultMaxFileBytes = 64 << 20

// DefaultConfig is the configuration the importer fills in for the fields
// left zero (Dir and Campaign aside: they come from the run directory).
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Campaign == "" && c.Dir != "" {
		abs, err := filepath.Abs(c.Dir)
		if err == nil {
			c.Campaign = filepath.Base(abs)
		}
	}
	if c.Project == "" {
		c.Project = schemas.DefaultProject
	}
	if c.AnchorAgents == nil {
		c.AnchorAgents = slices.Clone(DefaultAnchors)
	}
	if c.AnchorEvolvers == nil {
		c.AnchorEvolvers = slices.Clone(DefaultAnchors)
	}
	if c.Git == "" {
		c.Git = "git"
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
}

// Validate reports every problem of the configuration, joined.
func (c *Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, fmt.Errorf("%w: no directory given", ErrConfig))
	} else if st, err := os.Stat(c.Dir); err != nil || !st.IsDir() {
		errs = append(errs, fmt.Errorf("%w: %s is not a directory", ErrConfig, c.Dir))
	}
	if c.Campaign == "" {
		errs = append(errs, fmt.Errorf("%w: no campaign id", ErrConfig))
	}
	if c.MaxFileBytes < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxFileBytes %d is negative (0 takes the default, %d)", ErrConfig, c.MaxFileBytes, DefaultMaxFileBytes))
	}
	return errors.Join(errs...)
}

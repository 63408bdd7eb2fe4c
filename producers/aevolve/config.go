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
}

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
	return errors.Join(errs...)
}

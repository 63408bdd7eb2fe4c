package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envName is the environment variable that sets flag name: HF_ + upper snake case.
func envName(name string) string {
	return "HF_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// bindEnv makes every flag of every command settable from its environment
// variable; a flag given on the command line wins. It also appends the variable's
// name to the flag's usage so that --help shows it. Then, before the
// command's own PreRunE, it runs global (the global flags' effect).
func bindEnv(cmd *cobra.Command, global func() error) {
	apply := func(fs *pflag.FlagSet) {
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || strings.Contains(f.Usage, "[env ") {
				return
			}
			f.Usage += " [env " + envName(f.Name) + "]"
		})
	}
	apply(cmd.Flags())
	apply(cmd.PersistentFlags())
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		var err error
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Changed || err != nil {
				return
			}
			if v, ok := os.LookupEnv(envName(f.Name)); ok {
				err = c.Flags().Set(f.Name, v)
			}
		})
		if err != nil {
			return withCode(2, err)
		}
		if global != nil {
			if err := global(); err != nil {
				return withCode(2, err)
			}
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
	for _, sub := range cmd.Commands() {
		bindEnv(sub, global)
	}
}

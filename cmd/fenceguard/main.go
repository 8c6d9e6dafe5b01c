package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{Use: "fenceguard", Version: "(devel)"}
	root.SetVersionTemplate("fenceguard {{.Version}}\n")
	if err := root.Execute(); err != nil {
		os.Exit(64)
	}
}

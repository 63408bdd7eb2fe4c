package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NPMInteropPackages are the npm packages the interoperability tests run
// with node, as infra/scripts/ensure-deps.sh --test installs them (keep the
// versions in step with its npm_interop_pkgs): independent Kafka and
// Confluent Schema Registry clients that no one here wrote.
var NPMInteropPackages = []string{"kafkajs@2.2.4", "@kafkajs/confluent-schema-registry@4.1.0"}

// NPMInteropDir is the folder whose node_modules holds NPMInteropPackages:
// $HF_NPM_INTEROP when set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/harnessflow/npm-interop.
func NPMInteropDir() string {
	if d := os.Getenv("HF_NPM_INTEROP"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "harnessflow", "npm-interop")
}

// Node returns the path of node and the node_modules folder that holds
// each of pkgs (names as in NPMInteropPackages, without the version), for
// a command's NODE_PATH. When node or a package is missing the test stops
// with Missing: it fails under CI=true and skips elsewhere.
func Node(t testing.TB, pkgs ...string) (node, nodePath string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		Missing(t, "node is not installed (sudo apt-get install -y nodejs npm, or run infra/scripts/ensure-deps.sh --test)")
		return "", ""
	}
	nodePath = filepath.Join(NPMInteropDir(), "node_modules")
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(nodePath, p, "package.json")); err != nil {
			Missing(t, "npm package "+p+" is not in "+nodePath+" (run infra/scripts/ensure-deps.sh --test, or npm install --prefix "+
				NPMInteropDir()+" "+strings.Join(NPMInteropPackages, " ")+")")
			return "", ""
		}
	}
	return node, nodePath
}

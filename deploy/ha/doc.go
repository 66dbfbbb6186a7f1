// Package ha holds the files of idmint's high-availability deployment:
// Patroni-run PostgreSQL nodes, etcd, and idmint instances on the cluster's
// multi-host URL (see README.md in this directory). They are embedded so
// that the failover drill (testkit/hacluster, make drill-ha) renders the
// very files a deployment uses:
//
//	raw, _ := ha.Files.ReadFile("patroni.yml")
//	conf, err := ha.Render(raw, map[string]string{"NAME": "node0", …})
package ha

import (
	"embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
)

// Files holds the deployment's templates and scripts.
//
//go:embed patroni.yml etcd.yml post-bootstrap.sh idmint.env
var Files embed.FS

// ErrUnset reports a placeholder Render was given no value for.
var ErrUnset = errors.New("ha: placeholder without a value")

// placeholder is a ${NAME} in a template; cluster.sh fills in the same ones.
var placeholder = regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*)\}`)

// Render replaces every ${NAME} in tmpl with vars[NAME]. A placeholder
// missing from vars is an error naming all such, so a template and its
// renderers cannot drift apart unnoticed.
func Render(tmpl []byte, vars map[string]string) ([]byte, error) {
	var missing []string
	out := placeholder.ReplaceAllFunc(tmpl, func(m []byte) []byte {
		name := string(placeholder.FindSubmatch(m)[1])
		v, ok := vars[name]
		if !ok {
			if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			return m
		}
		return []byte(v)
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %v", ErrUnset, missing)
	}
	return out, nil
}

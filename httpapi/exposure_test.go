package httpapi_test

import (
	"strings"
	"testing"
)

// TestDeploy_ComposeExposure: the compose file publishes ports on loopback
// only, keeps no password in plain text (they come from the env file), and
// lets nobody into Grafana anonymously.
func TestDeploy_ComposeExposure(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Ports       []string
			Environment map[string]string
		}
	}
	readYAML(t, "../docker-compose.yml", &compose)
	if len(compose.Services) == 0 {
		t.Fatal("no services in docker-compose.yml")
	}
	for name, s := range compose.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every interface; want 127.0.0.1:…", name, p)
			}
		}
		for k, v := range s.Environment {
			secret := strings.Contains(k, "PASSWORD") || strings.Contains(k, "DATABASE_URL")
			if secret && !strings.Contains(v, "${") {
				t.Errorf("%s: %s is written in the compose file; take it from the env file", name, k)
			}
		}
	}
	g := compose.Services["grafana"].Environment
	if g["GF_AUTH_ANONYMOUS_ENABLED"] != "false" || g["GF_AUTH_ANONYMOUS_ORG_ROLE"] != "" || !strings.HasPrefix(g["GF_SECURITY_ADMIN_PASSWORD"], "${") {
		t.Errorf("grafana: anonymous access or a fixed admin password: %v", g)
	}
	if u := compose.Services["idmint"].Environment["IDMINT_DATABASE_URL"]; !strings.Contains(u, ":${POSTGRES_PASSWORD") {
		t.Errorf("idmint's database URL does not take the password from the env file: %s", u)
	}
}

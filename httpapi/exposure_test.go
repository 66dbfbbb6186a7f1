package httpapi_test

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// TestDeploy_ComposeExposure: the compose file publishes ports on loopback
// only, keeps no password in plain text (they come from the env file) nor
// in the database URL, and
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
			if strings.Contains(k, "PASSWORD") && !strings.Contains(v, "${") {
				t.Errorf("%s: %s is written in the compose file; take it from the env file", name, k)
			}
		}
	}
	g := compose.Services["grafana"].Environment
	if g["GF_AUTH_ANONYMOUS_ENABLED"] != "false" || g["GF_AUTH_ANONYMOUS_ORG_ROLE"] != "" || !strings.HasPrefix(g["GF_SECURITY_ADMIN_PASSWORD"], "${") {
		t.Errorf("grafana: anonymous access or a fixed admin password: %v", g)
	}
	// The password goes beside the URL (PGPASSWORD), never into it: see
	// TestDeploy_ComposePassword.
	idmint := compose.Services["idmint"].Environment
	if u, err := url.Parse(idmint["IDMINT_DATABASE_URL"]); err != nil || u.User == nil {
		t.Errorf("idmint's database URL %q: %v", idmint["IDMINT_DATABASE_URL"], err)
	} else if _, set := u.User.Password(); set {
		t.Errorf("idmint's database URL %q holds a password; pass it in PGPASSWORD", idmint["IDMINT_DATABASE_URL"])
	}
	if !strings.HasPrefix(idmint["PGPASSWORD"], "${POSTGRES_PASSWORD") {
		t.Errorf("idmint's PGPASSWORD %q does not come from the env file's POSTGRES_PASSWORD", idmint["PGPASSWORD"])
	}
}

// TestDeploy_DockerIgnore reads .dockerignore as docker build does and
// checks that env files, keys and secrets stay out of the build context,
// while what the build needs (sources, embedded files) stays in.
func TestDeploy_DockerIgnore(t *testing.T) {
	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		excluded bool
	}{
		{".env", true},
		{".env.local", true},
		{"deploy/.env", true},
		{"secrets/postgres_password", true},
		{"deploy/secrets/grafana", true},
		{"tls/server.key", true},
		{"tls/server.pem", true},
		{".idmint/idmint.db", true},
		{".git/config", true},
		{"go.mod", false},
		{"go.sum", false},
		{"cmd/idmint/main.go", false},
		{"migrations/postgres/00001_init.sql", false},
		{"deploy/ha/idmint.env", false}, // embedded by deploy/ha
		{"httpapi/openapi.yaml", false},
	}
	for _, tt := range tests {
		got, err := pm.MatchesOrParentMatches(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.excluded {
			t.Errorf("%s: excluded from the build context %v, want %v", tt.path, got, tt.excluded)
		}
	}
}

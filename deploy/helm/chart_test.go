package helm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "idmint"
	namespace = "ids"
	release   = "idmint"
	// kubeVersion is the cluster the chart is rendered for: the oldest its
	// Chart.yaml accepts would do as well.
	kubeVersion = "v1.33.0"
	// The repository root, for the Dockerfile and docs/.
	root = "../.."
)

// rendered is one render of the chart, every object decoded.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *serviceMonitor
	// text is the whole manifest as rendered.
	text string
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart writes (the operator's Go types are heavy); decoded strictly, a
// field the chart writes and this lacks fails.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Authorization *struct {
				Type        string                    `json:"type"`
				Credentials *corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization,omitempty"`
			TLSConfig map[string]any `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// values parses YAML as a -f values file would be.
func values(tb testing.TB, text string) chartutil.Values {
	tb.Helper()
	v, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		tb.Fatalf("values: %v", err)
	}
	return v
}

// render renders the chart with vals as `helm template` does: a client-only
// dry-run install, no cluster.
func render(tb testing.TB, vals chartutil.Values) (*rendered, error) {
	tb.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		tb.Fatalf("load the chart: %v", err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = release, namespace
	if install.KubeVersion, err = chartutil.ParseKubeVersion(kubeVersion); err != nil {
		tb.Fatal(err)
	}
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	return decode(tb, rel.Manifest), nil
}

// decode decodes every object of manifest into its API type, strictly:
// an unknown or duplicate field, a field of the wrong type, or a kind the
// test does not know fails.
func decode(tb testing.TB, manifest string) *rendered {
	tb.Helper()
	r := &rendered{text: manifest}
	docs := releaseutil.SplitManifests(manifest)
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		doc := docs[name]
		if strings.TrimSpace(doc) == "" {
			continue
		}
		data, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			tb.Fatalf("%s: %v\n%s", name, err, doc)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(data, &tm); err != nil {
			tb.Fatal(err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			r.deployment = once(tb, r.deployment, tm)
			obj = r.deployment
		case "v1 Service":
			r.service = once(tb, r.service, tm)
			obj = r.service
		case "policy/v1 PodDisruptionBudget":
			r.pdb = once(tb, r.pdb, tm)
			obj = r.pdb
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.serviceMonitor = once(tb, r.serviceMonitor, tm)
			obj = r.serviceMonitor
		default:
			tb.Fatalf("%s: %s %s is not checked by this test: add it\n%s", name, tm.APIVersion, tm.Kind, doc)
		}
		strict, err := sigsjson.UnmarshalStrict(data, obj)
		if err != nil {
			tb.Fatalf("%s %s: %v\n%s", tm.Kind, name, err, doc)
		}
		if len(strict) > 0 {
			tb.Fatalf("%s: %v\n%s", tm.Kind, strict, doc)
		}
	}
	if r.deployment == nil || r.service == nil {
		tb.Fatalf("no Deployment or no Service in:\n%s", manifest)
	}
	return r
}

// once returns a new T, failing if one was decoded already.
func once[T any](tb testing.TB, have *T, tm metav1.TypeMeta) *T {
	tb.Helper()
	if have != nil {
		tb.Fatalf("two %s", tm.Kind)
	}
	return new(T)
}

// lintChart runs Helm's linter with vals and returns its messages of
// severity sev or worse.
func lintChart(tb testing.TB, vals chartutil.Values, sev int) []support.Message {
	tb.Helper()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		tb.Fatal(err)
	}
	var out []support.Message
	for _, m := range lint.AllWithKubeVersion(chartDir, vals, namespace, kv).Messages {
		if m.Severity >= sev {
			out = append(out, m)
		}
	}
	return out
}

const database = "database: {existingSecret: idmint-db}\n"

// TestChart renders the chart with several values sets, lints each, and
// checks what every render must hold (checkRender) and what each set
// changes. A values set the chart must refuse fails to render, with a
// message that says what to set.
func TestChart(t *testing.T) {
	// Helm's engine logs every fail it renders.
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	tests := []struct {
		name   string
		values string
		// wantErr is part of the error rendering must fail with; empty:
		// it must render.
		wantErr string
		check   func(t *testing.T, r *rendered)
	}{
		{
			name:   "defaults",
			values: database,
			check: func(t *testing.T, r *rendered) {
				c := container(t, r)
				if *r.deployment.Spec.Replicas != 2 || r.pdb == nil || r.serviceMonitor != nil {
					t.Errorf("replicas %d, pdb %v, serviceMonitor %v", *r.deployment.Spec.Replicas, r.pdb != nil, r.serviceMonitor != nil)
				}
				for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
					if p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTP {
						t.Errorf("want plain HTTP probes by the kubelet, got %+v", p.ProbeHandler)
					}
				}
				if got := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 5+2*15+5 {
					t.Errorf("terminationGracePeriodSeconds %d, want 40 (values.yaml's arithmetic)", got)
				}
				if env(c, "IDMINT_AUTH") != "open" || env(c, "IDMINT_PROTECT_MONITORING") != "false" || env(c, "IDMINT_MIGRATE") != "true" {
					t.Errorf("env: %+v", c.Env)
				}
				// serve's own listener is on by default (:50051): off unless
				// grpc.listenPort names the port the chart exposes.
				if !slices.Contains(c.Args, "--grpc-listen=off") ||
					slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--grpc-listen=:") }) {
					t.Errorf("args %v: want --grpc-listen=off by default", c.Args)
				}
				if r.deployment.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
					t.Errorf("strategy %+v: a rolling update must not take capacity away", r.deployment.Spec.Strategy)
				}
			},
		},
		{
			name:   "one replica: no disruption budget",
			values: database + "replicaCount: 1\n",
			check: func(t *testing.T, r *rendered) {
				if r.pdb != nil {
					t.Error("a PodDisruptionBudget over one pod blocks every drain")
				}
			},
		},
		{
			name:   "three replicas",
			values: database + "replicaCount: 3\n",
			check: func(t *testing.T, r *rendered) {
				if r.pdb == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 || r.pdb.Spec.MinAvailable != nil ||
					r.pdb.Spec.UnhealthyPodEvictionPolicy == nil || *r.pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
					t.Errorf("pdb: %+v", r.pdb)
				}
			},
		},
		{
			name:   "service monitor",
			values: database + "serviceMonitor: {enabled: true, labels: {release: prometheus}}\n",
			check: func(t *testing.T, r *rendered) {
				sm := r.serviceMonitor
				if sm == nil || sm.Metadata.Labels["release"] != "prometheus" || len(sm.Spec.Endpoints) != 1 {
					t.Fatalf("serviceMonitor: %+v", sm)
				}
				if e := sm.Spec.Endpoints[0]; e.Path != "/metrics" || e.Scheme != "http" || e.Authorization != nil || e.Interval != "30s" {
					t.Errorf("endpoint: %+v", e)
				}
			},
		},
		{
			name:   "tls",
			values: database + "tls: {enabled: true, existingSecret: idmint-tls}\nserviceMonitor: {enabled: true, tlsConfig: {serverName: idmint.ids.svc}}\n",
			check: func(t *testing.T, r *rendered) {
				c := container(t, r)
				for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
					if p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
						t.Errorf("want HTTPS probes by the kubelet, got %+v", p.ProbeHandler)
					}
				}
				if env(c, "IDMINT_TLS_CERT") == "" || env(c, "IDMINT_TLS_KEY") == "" || env(c, "IDMINT_TLS_CLIENT_CA") != "" {
					t.Errorf("env: %+v", c.Env)
				}
				if v := volume(t, r, "tls"); v.Secret == nil || v.Secret.SecretName != "idmint-tls" {
					t.Errorf("tls volume: %+v", v)
				}
				e := r.serviceMonitor.Spec.Endpoints[0]
				if e.Scheme != "https" || e.TLSConfig["serverName"] != "idmint.ids.svc" {
					t.Errorf("endpoint: %+v", e)
				}
				if p := servicePort(t, r, "grpc"); p.AppProtocol != nil {
					t.Errorf("grpc port over TLS: appProtocol %q", *p.AppProtocol)
				}
			},
		},
		{
			name: "mtls: every probe runs idmint healthcheck with a client certificate",
			values: database + "tls: {enabled: true, existingSecret: idmint-tls, clientCA: {existingSecret: idmint-client-ca}," +
				" probeCertificate: {existingSecret: idmint-probe}}\n",
			check: func(t *testing.T, r *rendered) {
				c := container(t, r)
				for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
					if p.Exec == nil {
						t.Errorf("the kubelet cannot connect under mTLS, got %+v", p.ProbeHandler)
					}
				}
				for _, name := range []string{"IDMINT_TLS_CLIENT_CA", "IDMINT_CERT", "IDMINT_KEY", "IDMINT_TLS_CERT"} {
					if env(c, name) == "" {
						t.Errorf("no %s", name)
					}
				}
				if v := volume(t, r, "probe-tls"); v.Secret == nil || v.Secret.SecretName != "idmint-probe" {
					t.Errorf("probe-tls volume: %+v", v)
				}
			},
		},
		{
			name: "token auth, monitoring protected, token from a Secret",
			values: database + "auth: {mode: token, protectMonitoring: true, monitorToken: {existingSecret: idmint-monitor, key: secret}}\n" +
				"serviceMonitor: {enabled: true}\n",
			check: func(t *testing.T, r *rendered) {
				c := container(t, r)
				if c.ReadinessProbe.Exec == nil {
					t.Errorf("readiness needs the token: want idmint healthcheck, got %+v", c.ReadinessProbe.ProbeHandler)
				}
				if c.LivenessProbe.HTTPGet == nil || c.StartupProbe.HTTPGet == nil {
					t.Errorf("/id/live needs no token: want the kubelet's HTTP probes, got %+v, %+v", c.LivenessProbe.ProbeHandler, c.StartupProbe.ProbeHandler)
				}
				if env(c, "IDMINT_AUTH") != "token" || env(c, "IDMINT_PROTECT_MONITORING") != "true" || env(c, "IDMINT_HEALTHCHECK_TOKEN_FILE") == "" {
					t.Errorf("env: %+v", c.Env)
				}
				v := volume(t, r, "monitor-token")
				if v.Secret == nil || v.Secret.SecretName != "idmint-monitor" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "secret" {
					t.Errorf("monitor-token volume: %+v", v)
				}
				a := r.serviceMonitor.Spec.Endpoints[0].Authorization
				if a == nil || a.Type != "Bearer" || a.Credentials == nil || a.Credentials.Name != "idmint-monitor" || a.Credentials.Key != "secret" {
					t.Errorf("serviceMonitor authorization: %+v", a)
				}
			},
		},
		{
			name:   "grpc listen port",
			values: database + "grpc: {listenPort: 9443}\n",
			check: func(t *testing.T, r *rendered) {
				c := container(t, r)
				if !slices.Contains(c.Args, "--grpc-listen=:9443") || containerPort(c, "grpc") != 9443 {
					t.Errorf("args %v, ports %+v", c.Args, c.Ports)
				}
				if p := servicePort(t, r, "grpc"); p.TargetPort.String() != "grpc" || p.Port != 9090 {
					t.Errorf("service grpc port: %+v", p)
				}
			},
		},
		{
			name:   "longer shutdown",
			values: database + "shutdownTimeoutSeconds: 30\npreStopSleepSeconds: 10\n",
			check: func(t *testing.T, r *rendered) {
				if got := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 10+2*30+5 {
					t.Errorf("terminationGracePeriodSeconds %d, want 75", got)
				}
			},
		},
		{
			name:   "no preStop sleep",
			values: database + "preStopSleepSeconds: 0\n",
			check: func(t *testing.T, r *rendered) {
				if c := container(t, r); c.Lifecycle != nil {
					t.Errorf("lifecycle: %+v", c.Lifecycle)
				}
			},
		},
		{
			name:   "config flags",
			values: database + "config: {runway: 10m, snowflake-lease-ttl: 13m, tag: 'order,invoice'}\n",
			check: func(t *testing.T, r *rendered) {
				c := container(t, r)
				if env(c, "IDMINT_RUNWAY") != "10m" || env(c, "IDMINT_SNOWFLAKE_LEASE_TTL") != "13m" || env(c, "IDMINT_TAG") != "order,invoice" {
					t.Errorf("env: %+v", c.Env)
				}
			},
		},
		{name: "no database", values: "", wantErr: "database.existingSecret is required"},
		{name: "monitoring protected without a token", values: database + "auth: {protectMonitoring: true}\n", wantErr: "auth.monitorToken.existingSecret"},
		{name: "tls without a Secret", values: database + "tls: {enabled: true}\n", wantErr: "tls.existingSecret"},
		{
			name:    "mtls without a probe certificate",
			values:  database + "tls: {enabled: true, existingSecret: idmint-tls, clientCA: {existingSecret: idmint-client-ca}}\n",
			wantErr: "tls.probeCertificate.existingSecret",
		},
		{name: "grace shorter than the shutdown", values: database + "terminationGracePeriodSeconds: 30\n", wantErr: "terminationGracePeriodSeconds 30 is shorter than"},
		{name: "database url inlined in config", values: database + "config: {database-url: 'postgres://u:p@db/ids'}\n", wantErr: "config.database-url"},
		{name: "not a flag name", values: database + "config: {RUNWAY: 10m}\n", wantErr: "config.RUNWAY"},
		{name: "unknown auth mode", values: database + "auth: {mode: tokens}\n", wantErr: "/auth/mode"},
		{name: "misspelt value", values: database + "replicas: 3\n", wantErr: "replicas"},
		{name: "number where a string belongs", values: database + "config: {max-count: 500}\n", wantErr: "/config/max-count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals := values(t, tt.values)
			r, err := render(t, vals)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("render: %v, want an error with %q", err, tt.wantErr)
				}
				// Not linted: Helm's linter renders a template's fail as
				// a log line on purpose (lint mode), so it cannot say it.
				return
			}
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			for _, m := range lintChart(t, vals, support.WarningSev) {
				t.Errorf("lint: %s", m)
			}
			checkRender(t, r)
			tt.check(t, r)
		})
	}
}

// checkRender checks what every render of the chart must hold.
func checkRender(t *testing.T, r *rendered) {
	t.Helper()
	pod := r.deployment.Spec.Template.Spec
	c := container(t, r)
	checkProbes(t, c)
	checkSecurity(t, pod, c)
	checkShutdown(t, pod, c)
	checkFiles(t, pod, c)
	checkEnv(t, c)
	checkNoSecretInline(t, r)

	// The Service, the budget and the ServiceMonitor find the pods.
	labels := r.deployment.Spec.Template.Labels
	if !subset(r.deployment.Spec.Selector.MatchLabels, labels) || !subset(r.service.Spec.Selector, labels) {
		t.Errorf("selectors %v, %v do not match the pod's labels %v", r.deployment.Spec.Selector.MatchLabels, r.service.Spec.Selector, labels)
	}
	replicas := *r.deployment.Spec.Replicas
	if (r.pdb != nil) != (replicas >= 2) {
		t.Errorf("%d replicas, PodDisruptionBudget %v: want one from 2 replicas on", replicas, r.pdb != nil)
	}
	if r.pdb != nil && !subset(r.pdb.Spec.Selector.MatchLabels, labels) {
		t.Errorf("pdb selector %v, pod labels %v", r.pdb.Spec.Selector.MatchLabels, labels)
	}
	for _, name := range []string{"http", "grpc"} {
		p := servicePort(t, r, name)
		target := p.TargetPort.String()
		if containerPort(c, target) == 0 {
			t.Errorf("service port %s targets %q, no container port of that name", name, target)
		}
	}
	if grpc := servicePort(t, r, "grpc"); containerPort(c, "grpc") != 0 && grpc.TargetPort.String() != "grpc" {
		t.Error("the native gRPC listener is served, but the Service's grpc port does not lead there")
	}
	if sm := r.serviceMonitor; sm != nil {
		if !subset(sm.Spec.Selector.MatchLabels, r.service.Labels) {
			t.Errorf("serviceMonitor selector %v, service labels %v", sm.Spec.Selector.MatchLabels, r.service.Labels)
		}
		for _, e := range sm.Spec.Endpoints {
			servicePort(t, r, e.Port)
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it never uses")
	}
	// A Service named idmint would set IDMINT_PORT=tcp://…, read as a flag.
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks: want false")
	}
}

// checkProbes: liveness and startup ask /id/live, never /id/health (a
// database outage must not restart the pods); readiness asks /id/health.
func checkProbes(t *testing.T, c *corev1.Container) {
	t.Helper()
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil {
			t.Errorf("no %s probe", name)
			continue
		}
		target := probeTarget(t, c, p)
		want := "/id/live"
		if name == "readiness" {
			want = "/id/health"
		}
		if target != want {
			t.Errorf("%s probe asks %s, want %s", name, target, want)
		}
		if p.Exec != nil {
			// healthcheck's own timeout ends before the kubelet's.
			var timeout time.Duration = 3 * time.Second
			for _, a := range p.Exec.Command {
				if v, ok := strings.CutPrefix(a, "--healthcheck-timeout="); ok {
					var err error
					if timeout, err = time.ParseDuration(v); err != nil {
						t.Errorf("%s: %v", a, err)
					}
				}
			}
			if timeout >= time.Duration(p.TimeoutSeconds)*time.Second {
				t.Errorf("%s probe: healthcheck waits %v, the kubelet %ds", name, timeout, p.TimeoutSeconds)
			}
		}
	}
	if c.LivenessProbe != nil && c.ReadinessProbe != nil && c.LivenessProbe.FailureThreshold*c.LivenessProbe.PeriodSeconds < 10 {
		t.Errorf("liveness gives up after %ds", c.LivenessProbe.FailureThreshold*c.LivenessProbe.PeriodSeconds)
	}
}

// probeTarget is the path a probe asks: its httpGet path, or the path of
// the URL `idmint healthcheck` asks (/id/health by default).
func probeTarget(t *testing.T, c *corev1.Container, p *corev1.Probe) string {
	t.Helper()
	switch {
	case p.HTTPGet != nil:
		if port := p.HTTPGet.Port; containerPort(c, port.String()) == 0 {
			t.Errorf("probe port %s: no such container port", port.String())
		}
		return p.HTTPGet.Path
	case p.Exec != nil:
		cmd := p.Exec.Command
		if len(cmd) < 2 || cmd[0] != imageBinary(t) || cmd[1] != "healthcheck" {
			t.Errorf("exec probe %v: want %s healthcheck", cmd, imageBinary(t))
			return ""
		}
		target := "/id/health"
		for _, a := range cmd[2:] {
			if u, ok := strings.CutPrefix(a, "--healthcheck-url="); ok {
				i := strings.Index(u, "://")
				j := strings.IndexByte(u[i+3:], '/')
				if i < 0 || j < 0 {
					t.Errorf("%s: not a URL", a)
					return ""
				}
				target = u[i+3+j:]
			}
		}
		return target
	}
	t.Errorf("probe %+v: neither httpGet nor exec", p.ProbeHandler)
	return ""
}

// checkSecurity: non-root as the image's user, no privilege escalation, a
// read-only root filesystem, every capability dropped, seccomp
// RuntimeDefault.
func checkSecurity(t *testing.T, pod corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	ps, cs := pod.SecurityContext, c.SecurityContext
	if ps == nil || cs == nil {
		t.Fatal("no security context")
	}
	if ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != imageUser(t) {
		t.Errorf("pod security context %+v: want non-root as the image's user %d", ps, imageUser(t))
	}
	if ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp %+v", ps.SeccompProfile)
	}
	if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
		cs.Privileged != nil && *cs.Privileged ||
		cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.RunAsNonRoot == nil || !*cs.RunAsNonRoot ||
		cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0 ||
		cs.SeccompProfile == nil || cs.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context: %+v", cs)
	}
}

// checkShutdown: the kubelet waits for the preStop sleep and both phases of
// serve's shutdown (drain, then give-backs and the worker ID's release),
// each bounded by --shutdown-timeout, before it kills the process.
func checkShutdown(t *testing.T, pod corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	shutdown, err := time.ParseDuration(env(c, "IDMINT_SHUTDOWN_TIMEOUT"))
	if err != nil {
		t.Fatalf("IDMINT_SHUTDOWN_TIMEOUT: %v", err)
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if c.Lifecycle.PreStop.Sleep == nil {
			t.Fatalf("preStop %+v: the image has no shell, want the sleep action", c.Lifecycle.PreStop)
		}
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if budget := preStop + 2*shutdown; grace < budget {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + 2 × shutdown timeout %v", grace, preStop, shutdown)
	}
}

// checkFiles: every path in the environment is a file of a Secret mounted
// read-only; /tmp is the only writable place.
func checkFiles(t *testing.T, pod corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
		v, ok := vols[m.Name]
		switch {
		case !ok:
			t.Errorf("mount %s: no volume %s", m.MountPath, m.Name)
		case m.MountPath == "/tmp":
			if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil {
				t.Errorf("/tmp: want a bounded emptyDir, got %+v", v.VolumeSource)
			}
		case v.Secret == nil || !m.ReadOnly || m.SubPath != "":
			t.Errorf("mount %s: want a Secret mounted read-only without subPath (a renewed certificate must reach the pod), got %+v %+v", m.MountPath, m, v.VolumeSource)
		}
	}
	if _, ok := mounts["/tmp"]; !ok {
		t.Error("no emptyDir at /tmp")
	}
	files := 0
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Value, "/") {
			if strings.HasSuffix(e.Name, "_FILE") {
				t.Errorf("%s=%q: not a path", e.Name, e.Value)
			}
			continue
		}
		files++
		dir, file := path.Split(e.Value)
		m, ok := mounts[path.Clean(dir)]
		if !ok {
			t.Errorf("%s=%s: no volume is mounted at %s", e.Name, e.Value, dir)
			continue
		}
		v := vols[m.Name]
		if v.Secret == nil || !slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == file }) {
			t.Errorf("%s=%s: volume %s does not hold %s: %+v", e.Name, e.Value, m.Name, file, v.VolumeSource)
		}
	}
	if env(c, "IDMINT_DATABASE_URL_FILE") == "" || files == 0 {
		t.Errorf("no IDMINT_DATABASE_URL_FILE: %+v", c.Env)
	}
}

// checkEnv: every IDMINT_ variable is a flag of serve or healthcheck (as
// docs/cli.md lists them; an unknown one would be ignored), and the
// secrets come as _FILE only, never in the environment.
func checkEnv(t *testing.T, c *corev1.Container) {
	t.Helper()
	known := cliEnv(t)
	for _, e := range c.Env {
		name, _ := strings.CutSuffix(e.Name, "_FILE")
		if !strings.HasPrefix(name, "IDMINT_") {
			t.Errorf("env %s: not idmint's", e.Name)
			continue
		}
		if !known[name] {
			t.Errorf("env %s: no flag of serve or healthcheck reads it (docs/cli.md)", e.Name)
		}
		switch name {
		case "IDMINT_DATABASE_URL", "IDMINT_HEALTHCHECK_TOKEN":
			if e.Name == name {
				t.Errorf("%s: a secret in the environment; want %s_FILE", e.Name, name)
			}
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("%s: a Secret's value in the environment; mount it and use _FILE", e.Name)
		}
	}
}

// checkNoSecretInline: no Secret is rendered, and nothing in the manifest
// looks like a database URL, a token or key material.
func checkNoSecretInline(t *testing.T, r *rendered) {
	t.Helper()
	for _, s := range []string{"postgres://", "postgresql://", "idm_", "PRIVATE KEY", "BEGIN CERTIFICATE", "kind: Secret", "password"} {
		if strings.Contains(r.text, s) {
			t.Errorf("the manifest holds %q", s)
		}
	}
}

func container(t *testing.T, r *rendered) *corev1.Container {
	t.Helper()
	cs := r.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers", len(cs))
	}
	return &cs[0]
}

func env(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func containerPort(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func servicePort(t *testing.T, r *rendered, name string) corev1.ServicePort {
	t.Helper()
	for _, p := range r.service.Spec.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no service port %s: %+v", name, r.service.Spec.Ports)
	return corev1.ServicePort{}
}

func volume(t *testing.T, r *rendered, name string) corev1.Volume {
	t.Helper()
	for _, v := range r.deployment.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// imageUser and imageBinary read the Dockerfile's USER and the path the
// binary is copied to: the chart's runAsUser and exec probes must agree.
func imageUser(t *testing.T) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^USER (\d+):\d+$`).FindSubmatch(dockerfile(t))
	if m == nil {
		t.Fatal("Dockerfile: no USER uid:gid")
	}
	var uid int64
	fmt.Sscan(string(m[1]), &uid)
	return uid
}

func imageBinary(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]$`).FindSubmatch(dockerfile(t))
	if m == nil {
		t.Fatal("Dockerfile: no ENTRYPOINT [\"…\"]")
	}
	return string(m[1])
}

func dockerfile(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(root + "/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cliEnv is the environment variables of `idmint serve` and `idmint
// healthcheck`, from docs/cli.md (generated from the command table).
func cliEnv(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(root + "/docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, section := range bytes.Split(b, []byte("\n## ")) {
		if !bytes.HasPrefix(section, []byte("idmint serve\n")) && !bytes.HasPrefix(section, []byte("idmint healthcheck\n")) {
			continue
		}
		for _, m := range regexp.MustCompile("\\| `--[a-z0-9-]+` \\| `(IDMINT_[A-Z0-9_]+)`[^|]*\\|").FindAllSubmatch(section, -1) {
			known[string(m[1])] = true
		}
	}
	if !known["IDMINT_LISTEN"] || !known["IDMINT_HEALTHCHECK_TOKEN"] || !known["IDMINT_SHUTDOWN_TIMEOUT"] {
		t.Fatalf("docs/cli.md: the flag tables of serve and healthcheck not found (%d variables)", len(known))
	}
	return known
}

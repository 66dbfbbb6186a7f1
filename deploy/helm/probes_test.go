package helm_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestChart_ProbesOnServe runs the rendered container as the kubelet would,
// without a cluster: the real idmint binary with the container's arguments
// and environment, the Secrets written where the volumes mount them (under
// a temporary directory), and each probe as the kubelet runs it (an HTTP
// GET that trusts any certificate, or the exec command). Every probe
// passes, in the plain, monitoring-protected and mTLS modes; a readiness
// check without the token, or a kubelet-style GET under mTLS, fails (so
// the exec probes are needed); SIGTERM stops the process within the grace
// period. The database is a SQLite file here: the probes and the wiring
// are the same as with PostgreSQL.
func TestChart_ProbesOnServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint")
	}
	bin := buildIdmint(t)
	pki := newPKI(t)
	tests := []struct {
		name   string
		values string
		// denied is a probe the kubelet could not pass in this mode.
		denied func(t *testing.T, c *corev1.Container, s *sandbox)
	}{
		{name: "plain", values: database},
		{
			name:   "monitoring protected, token auth",
			values: database + "auth: {mode: token, protectMonitoring: true, monitorToken: {existingSecret: idmint-monitor}}\n",
			denied: func(t *testing.T, c *corev1.Container, s *sandbox) {
				if err := s.exec(c.ReadinessProbe.Exec.Command, "IDMINT_HEALTHCHECK_TOKEN_FILE"); err == nil {
					t.Error("readiness passes without the monitor token: protectMonitoring does not protect /id/health")
				}
				if code := s.get(t, "HTTP", "/id/health"); code != http.StatusUnauthorized {
					t.Errorf("a kubelet GET of /id/health: %d, want 401", code)
				}
			},
		},
		{
			name: "mtls, monitoring protected",
			values: database + "auth: {protectMonitoring: true, monitorToken: {existingSecret: idmint-monitor}}\n" +
				"tls: {enabled: true, existingSecret: idmint-tls, clientCA: {existingSecret: idmint-client-ca}, probeCertificate: {existingSecret: idmint-probe}}\n",
			denied: func(t *testing.T, c *corev1.Container, s *sandbox) {
				if code := s.get(t, "HTTPS", "/id/live"); code != 0 {
					t.Errorf("a GET without a client certificate under mTLS answered %d", code)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := freePort(t)
			r, err := render(t, values(t, tt.values+fmt.Sprintf("port: %d\n", port)))
			if err != nil {
				t.Fatal(err)
			}
			c := container(t, r)
			s := newSandbox(t, bin, port, r.deployment.Spec.Template.Spec, c)
			s.secrets(t, map[string]map[string][]byte{
				"idmint-db":        {"url": []byte("sqlite://" + filepath.Join(s.dir, "idmint.db") + "\n")},
				"idmint-tls":       {"tls.crt": pki.serverCert, "tls.key": pki.serverKey},
				"idmint-client-ca": {"ca.crt": pki.caCert},
				"idmint-probe":     {"tls.crt": pki.clientCert, "tls.key": pki.clientKey},
			})
			s.secrets(t, map[string]map[string][]byte{"idmint-monitor": {"token": s.monitorToken(t)}})
			s.start(t, c.Args)

			// Startup gates the others, as the kubelet runs them.
			probe := func(name string, p *corev1.Probe) error {
				if p.Exec != nil {
					return s.exec(p.Exec.Command)
				}
				if code := s.get(t, string(p.HTTPGet.Scheme), p.HTTPGet.Path); code < 200 || code >= 400 {
					return fmt.Errorf("%s probe: GET %s answered %d", name, p.HTTPGet.Path, code)
				}
				return nil
			}
			s.waitFor(t, "the startup probe", func() error { return probe("startup", c.StartupProbe) })
			for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if err := probe(name, p); err != nil {
					t.Errorf("%s probe: %v", name, err)
				}
			}
			if tt.denied != nil {
				tt.denied(t, c, s)
			}
			s.stop(t, time.Duration(*r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second)
		})
	}
}

// sandbox is one container's filesystem and process, under dir.
type sandbox struct {
	dir, bin string
	port     int
	pod      corev1.PodSpec
	env      []string
	cmd      *exec.Cmd
	stderr   bytes.Buffer
	// exited is closed when the process has exited, with waitErr set.
	exited  chan struct{}
	waitErr error
}

func newSandbox(t *testing.T, bin string, port int, pod corev1.PodSpec, c *corev1.Container) *sandbox {
	t.Helper()
	s := &sandbox{dir: t.TempDir(), bin: bin, port: port, pod: pod}
	// The container's environment, its paths moved under dir; the
	// downward API's pod name given.
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			s.env = append(s.env, e.Name+"=idmint-0")
		case e.ValueFrom != nil:
			t.Fatalf("%s: valueFrom %+v not handled", e.Name, e.ValueFrom)
		case strings.HasPrefix(e.Value, "/"):
			s.env = append(s.env, e.Name+"="+s.dir+e.Value)
		default:
			s.env = append(s.env, e.Name+"="+e.Value)
		}
	}
	return s
}

// secrets writes the Secrets' keys where the pod's secret volumes mount
// them; a Secret the pod does not mount is skipped.
func (s *sandbox) secrets(t *testing.T, secrets map[string]map[string][]byte) {
	t.Helper()
	c := s.pod.Containers[0]
	for _, v := range s.pod.Volumes {
		if v.Secret == nil || secrets[v.Secret.SecretName] == nil {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name != v.Name {
				continue
			}
			for _, item := range v.Secret.Items {
				data, ok := secrets[v.Secret.SecretName][item.Key]
				if !ok {
					t.Fatalf("secret %s has no key %s", v.Secret.SecretName, item.Key)
				}
				file := filepath.Join(s.dir, m.MountPath, item.Path)
				if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, data, 0o400); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// monitorToken makes a token with the monitor scope in the database, as
// an operator would with `idmint token create` before installing.
func (s *sandbox) monitorToken(t *testing.T) []byte {
	t.Helper()
	cmd := exec.Command(s.bin, "token", "create", "--name", "probes", "--scope", "monitor")
	for _, e := range s.env {
		if strings.HasPrefix(e, "IDMINT_DATABASE_URL_FILE=") {
			cmd.Env = []string{e}
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("idmint token create: %v", err)
	}
	return out
}

// start runs the container's command: the image's entrypoint, /idmint,
// with args.
func (s *sandbox) start(t *testing.T, args []string) {
	t.Helper()
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Env = s.env
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("idmint serve's log:\n%s", s.stderr.String())
		}
	})
}

// exec runs an exec probe's command in the container's environment, less
// the variables named in without.
func (s *sandbox) exec(command []string, without ...string) error {
	if len(command) == 0 || command[0] != "/idmint" {
		return fmt.Errorf("exec %v: not the image's /idmint", command)
	}
	cmd := exec.Command(s.bin, command[1:]...)
	for _, e := range s.env {
		name, _, _ := strings.Cut(e, "=")
		if !slices.Contains(without, name) {
			cmd.Env = append(cmd.Env, e)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %v: %s", command, err, out)
	}
	return nil
}

// get is the kubelet's HTTP probe: a GET to the pod's port that trusts any
// certificate and presents none. 0: no answer.
func (s *sandbox) get(t *testing.T, scheme, path string) int {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(fmt.Sprintf("%s://127.0.0.1:%d%s", strings.ToLower(scheme), s.port, path))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls check, as the kubelet's startup probe does, for at most a
// minute (serve migrates the database and leases a worker ID first).
func (s *sandbox) waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-s.exited:
			t.Fatalf("%s: idmint exited (%v)", what, s.waitErr)
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM, as the kubelet does after the preStop hook, and
// waits at most grace for a clean exit.
func (s *sandbox) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		if s.waitErr != nil {
			t.Errorf("idmint serve after SIGTERM: %v", s.waitErr)
		}
		if !strings.Contains(s.stderr.String(), "idmint stopped") {
			t.Errorf("no clean stop in the log")
		}
	case <-time.After(grace):
		t.Errorf("idmint serve still running %v after SIGTERM: the kubelet would kill it", grace)
	}
}

// buildIdmint builds the idmint command of the repository.
func buildIdmint(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "idmint")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/idmint")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/idmint: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pki is a CA, a server certificate it signed for the Service's name (not
// 127.0.0.1: healthcheck trusts serve's certificate itself, whatever its
// names), and a client certificate it signed, all PEM.
type pki struct {
	caCert, serverCert, serverKey, clientCert, clientKey []byte
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idmint test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, dns ...string) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "idmint"}, DNSNames: dns,
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	}
	p := &pki{caCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	p.serverCert, p.serverKey = leaf(2, x509.ExtKeyUsageServerAuth, "idmint.ids.svc")
	p.clientCert, p.clientKey = leaf(3, x509.ExtKeyUsageClientAuth)
	return p
}

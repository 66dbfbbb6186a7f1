package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheckFlags is `idmint healthcheck`: exit 0 when /id/health answers
// 200, a container health check that needs no shell or curl in the image.
func healthcheckFlags(fs *flag.FlagSet) runFunc {
	listen := fs.String("listen", ":8080", "the address serve listens on (the same flag and IDMINT_LISTEN as serve)")
	url := fs.String("healthcheck-url", "", "health endpoint to check (default: /id/health at --listen, on loopback)")
	timeout := fs.Duration("healthcheck-timeout", 3*time.Second, "longest the check may take")
	token := fs.String("token", "", "bearer token, when serve runs with --protect-monitoring")
	renameEnv(fs, "token", "IDMINT_HEALTHCHECK_TOKEN", "IDMINT_TOKEN")
	var tlsFlags tlsClientFlags
	tlsFlags.register(fs)
	tlsFlags.registerPin(fs)
	return func(ctx context.Context, out output, _ []string) error {
		hc, err := tlsFlags.httpClient(0)
		if err != nil {
			return fmt.Errorf("healthcheck: %w", err)
		}
		return healthcheck(ctx, out.stdout, hc, *listen, *url, *timeout, *token, tlsFlags.set())
	}
}

// healthcheck asks target (default: /id/health at listen, over https when
// useTLS) once.
func healthcheck(ctx context.Context, stdout io.Writer, hc *http.Client, listen, url string, timeout time.Duration, token string, useTLS bool) error {
	target := url
	if target == "" {
		var err error
		if target, err = healthURL(listen, useTLS); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", target, resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

// healthURL is /id/health of an instance listening on listen: its port on
// loopback when it listens on every interface, else its host; https when
// useTLS.
func healthURL(listen string, useTLS bool) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("healthcheck: --listen %q: %w", listen, err)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	scheme := "http://"
	if useTLS {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port) + "/id/health", nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// wrkScript makes wrk print one machine-readable line at the end of a run.
const wrkScript = `done = function(summary, latency, requests)
  io.write(string.format("IDMINT-BENCH %d %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout))
end
`

// load is how hard wrk drives a server.
type load struct {
	wrk      string // path of the wrk binary
	script   string // path of wrkScript on disk
	threads  int
	conns    int
	duration time.Duration
}

// result is one wrk run.
type result struct {
	requests int64
	duration time.Duration
	p50, p99 time.Duration
	// non2xx counts replies with status ≥ 400 (wrk's "status errors");
	// socket counts connect, read, write errors and timeouts.
	non2xx, socket int64
}

func (r result) rate() float64 { return float64(r.requests) / r.duration.Seconds() }

// findWrk returns the path of wrk, installing Debian's package when it is
// missing and this process may.
func findWrk(ctx context.Context, logf func(string, ...any)) (string, error) {
	if p, err := exec.LookPath("wrk"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("wrk is not installed: apt-get install wrk (or put it on PATH)")
	}
	logf("wrk not found: apt-get install -y wrk")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "wrk"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return exec.LookPath("wrk")
}

func newLoad(wrk, dir string, threads, conns int, d time.Duration) (load, error) {
	script := filepath.Join(dir, "report.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o644); err != nil {
		return load{}, err
	}
	return load{wrk: wrk, script: script, threads: threads, conns: conns, duration: d}, nil
}

// run drives url for l.duration (or d, when not zero).
func (l load) run(ctx context.Context, url string, d time.Duration) (result, error) {
	if d == 0 {
		d = l.duration
	}
	secs := strconv.Itoa(max(1, int(d.Round(time.Second).Seconds())))
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.wrk, "-t", strconv.Itoa(l.threads), "-c", strconv.Itoa(l.conns),
		"-d", secs+"s", "-s", l.script, url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("wrk %s: %w\n%s", url, err, out.String())
	}
	r, err := parseWrk(out.String())
	if err != nil {
		return result{}, fmt.Errorf("wrk %s: %w", url, err)
	}
	return r, nil
}

// parseWrk reads the result line wrkScript prints.
func parseWrk(out string) (result, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 10 || f[0] != "IDMINT-BENCH" {
			continue
		}
		var v [9]int64
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return result{}, fmt.Errorf("result line %q: %w", sc.Text(), err)
			}
			v[i] = n
		}
		return result{
			requests: v[0], duration: time.Duration(v[1]) * time.Microsecond,
			p50: time.Duration(v[2]) * time.Microsecond, p99: time.Duration(v[3]) * time.Microsecond,
			socket: v[4] + v[5] + v[6] + v[8], non2xx: v[7],
		}, nil
	}
	return result{}, fmt.Errorf("no result line in its output:\n%s", out)
}

// series is the results of one target over the rounds.
type series []result

// median returns the median rate, p50 and p99 (each on its own), and the
// sums of the error counts.
func (s series) median() (m result) {
	med := func(f func(result) float64) float64 {
		v := make([]float64, len(s))
		for i, r := range s {
			v[i] = f(r)
		}
		return median(v)
	}
	rate := med(func(r result) float64 { return r.rate() })
	m.duration = time.Second
	m.requests = int64(rate)
	m.p50 = time.Duration(med(func(r result) float64 { return float64(r.p50) }))
	m.p99 = time.Duration(med(func(r result) float64 { return float64(r.p99) }))
	for _, r := range s {
		m.non2xx += r.non2xx
		m.socket += r.socket
	}
	return m
}

// pairedRatios returns the medians, over the rounds, of a's rate and p99
// over b's in the same round.
func pairedRatios(a, b series) (rate, p99 float64) {
	var rates, p99s []float64
	for i := range min(len(a), len(b)) {
		if b[i].rate() > 0 && b[i].p99 > 0 {
			rates = append(rates, a[i].rate()/b[i].rate())
			p99s = append(p99s, float64(a[i].p99)/float64(b[i].p99))
		}
	}
	return median(rates), median(p99s)
}

// median returns the median of v (0 for none), sorting v.
func median(v []float64) float64 {
	slices.Sort(v)
	switch {
	case len(v) == 0:
		return 0
	case len(v)%2 == 1:
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

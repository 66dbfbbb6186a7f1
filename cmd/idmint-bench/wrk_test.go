package main

import (
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := "Running 5s test @ http://127.0.0.1:1/id\n  2 threads and 64 connections\n" +
		"IDMINT-BENCH 400000 5000000 700 2500 1 2 3 4 5\n"
	got, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := result{requests: 400000, duration: 5 * time.Second, p50: 700 * time.Microsecond,
		p99: 2500 * time.Microsecond, non2xx: 4, socket: 1 + 2 + 3 + 5}
	if got != want || got.rate() != 80000 {
		t.Fatalf("parseWrk = %+v (rate %v), want %+v", got, got.rate(), want)
	}
	if _, err := parseWrk("Running 5s test\nno result\n"); err == nil {
		t.Fatal("parseWrk without a result line: no error")
	}
}

func TestSeries_Median(t *testing.T) {
	r := func(reqs int64, p99 time.Duration, non2xx int64) result {
		return result{requests: reqs, duration: time.Second, p50: p99 / 2, p99: p99, non2xx: non2xx}
	}
	m := series{r(300, 9*time.Millisecond, 1), r(100, 3*time.Millisecond, 0), r(200, 5*time.Millisecond, 2)}.median()
	if m.rate() != 200 || m.p99 != 5*time.Millisecond || m.p50 != 2500*time.Microsecond || m.non2xx != 3 {
		t.Fatalf("median = %+v", m)
	}
	if m := (series{r(100, time.Millisecond, 0), r(300, 3*time.Millisecond, 0)}).median(); m.rate() != 200 || m.p99 != 2*time.Millisecond {
		t.Fatalf("median of two = %+v", m)
	}
}

func TestPairedRatios(t *testing.T) {
	r := func(reqs int64, p99 time.Duration) result {
		return result{requests: reqs, duration: time.Second, p99: p99}
	}
	a := series{r(90, 2*time.Millisecond), r(50, 3*time.Millisecond), r(80, 4*time.Millisecond)}
	b := series{r(100, 2*time.Millisecond), r(100, 2*time.Millisecond), r(100, 4*time.Millisecond)}
	rate, p99 := pairedRatios(a, b)
	if rate != 0.8 || p99 != 1 {
		t.Fatalf("pairedRatios = %v, %v; want 0.8, 1", rate, p99)
	}
}

package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/core"
)

// The Snowflake routes (core: NextSnowflake, NextSnowflakes,
// ParseSnowflake).

type snowflakeResponse struct {
	ID int64 `json:"id,string"`
}

type snowflakesResponse struct {
	IDs []string `json:"ids"`
}

func (s *Server) handleSnowflake(w http.ResponseWriter, r *http.Request) {
	id, err := s.core.NextSnowflake(r.Context(), callerOf(r))
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if wantsText(r) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "%d\n", id)
		return
	}
	writeJSON(w, http.StatusOK, snowflakeResponse{ID: id})
}

func (s *Server) handleSnowflakes(w http.ResponseWriter, r *http.Request) {
	n, bad := countParam(r.URL.RawQuery, s.core.MaxCount())
	ids, err := s.core.NextSnowflakes(r.Context(), callerOf(r), n, bad)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	resp := snowflakesResponse{IDs: make([]string, len(ids))}
	for i, id := range ids {
		resp.IDs[i] = strconv.FormatInt(id, 10)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleSnowflakeParse(w http.ResponseWriter, r *http.Request) {
	vals := r.URL.Query()["id"]
	if len(vals) != 1 {
		s.WriteError(w, r, core.ErrSnowflakeID)
		return
	}
	p, err := s.core.ParseSnowflake(r.Context(), callerOf(r), vals[0])
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// snowflakeCollector turns the node's Stats into metrics when scraped.
type snowflakeCollector struct {
	node                                                    Snowflake
	worker, epoch, remaining, window, offset, serving       *prometheus.Desc
	issued, seqWaits, clockWaits, refused, renewFails, lost *prometheus.Desc
}

func newSnowflakeCollector(n Snowflake) *snowflakeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("idmint_snowflake_"+name, help, labels, nil)
	}
	return &snowflakeCollector{
		node:       n,
		worker:     d("worker_id", "Worker ID leased by this instance; -1 when none."),
		epoch:      d("lease_epoch", "Fencing epoch of the worker ID lease held."),
		remaining:  d("lease_remaining_seconds", "Time left before the worker ID lease expires unless renewed."),
		window:     d("window_remaining_seconds", "Time left before the lease window ends unless renewed: how long snowflake IDs can still be issued without the database."),
		offset:     d("clock_offset_seconds", "The database's clock minus this instance's, at the last lease acquisition or renewal."),
		serving:    d("serving", "1 when a snowflake ID can be issued now."),
		issued:     d("ids_issued_total", "Snowflake IDs handed out."),
		seqWaits:   d("sequence_waits_total", "Waits for the next millisecond after its sequence ran out."),
		clockWaits: d("clock_waits_total", "Waits for the clock to reach the last millisecond used or the lease window's start."),
		refused:    d("refused_total", "Snowflake requests refused, by reason.", "reason"),
		renewFails: d("lease_renew_failures_total", "Worker ID lease renewals that failed."),
		lost:       d("leases_lost_total", "Worker ID leases found taken over by another instance."),
	}
}

// Describe implements prometheus.Collector.
func (c *snowflakeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.worker, c.epoch, c.remaining, c.window, c.offset, c.serving, c.issued, c.seqWaits, c.clockWaits, c.refused, c.renewFails, c.lost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *snowflakeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.node.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.worker, float64(st.Worker))
	gauge(c.epoch, float64(st.Epoch))
	gauge(c.remaining, st.LeaseRemaining.Seconds())
	gauge(c.window, st.WindowRemaining.Seconds())
	gauge(c.offset, st.ClockOffset.Seconds())
	gauge(c.serving, boolFloat(st.Serving == nil))
	counter(c.issued, st.Issued)
	counter(c.seqWaits, st.SequenceWaits)
	counter(c.clockWaits, st.ClockWaits)
	counter(c.refused, st.RefusedNoWorker, "no_worker")
	counter(c.refused, st.RefusedExpired, "lease_expired")
	counter(c.refused, st.RefusedSkew, "clock_skew")
	counter(c.refused, st.RefusedBackwards, "clock_backwards")
	counter(c.refused, st.RefusedExhausted, "time_exhausted")
	counter(c.renewFails, st.RenewFailures)
	counter(c.lost, st.Losses)
}

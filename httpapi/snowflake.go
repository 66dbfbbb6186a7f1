package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/wire"
)

// Snowflake is what the API needs from a snowflake.Node.
type Snowflake interface {
	Next(ctx context.Context) (int64, error)
	NextN(ctx context.Context, n int) ([]int64, error)
	Layout() snowflake.Layout
	Stats() snowflake.Stats
}

var _ Snowflake = (*snowflake.Node)(nil)

// mountSnowflake adds the Snowflake routes.
func (s *Server) mountSnowflake(r chi.Router) {
	// IDs: behind the access control of the ID routes (a token with any ID
	// scope in the token mode; /snowflakes charged by its count).
	r.Method(http.MethodGet, "/snowflake", s.IDAccess(http.HandlerFunc(s.handleSnowflake)))
	r.Method(http.MethodGet, "/snowflakes", s.IDAccess(http.HandlerFunc(s.handleSnowflakes)))
	r.Get("/snowflake/parse", s.handleSnowflakeParse)
	s.cfg.Metrics.reg.MustRegister(newSnowflakeCollector(s.cfg.Snowflake))
}

type snowflakeResponse struct {
	ID int64 `json:"id,string"`
}

type snowflakesResponse struct {
	IDs []string `json:"ids"`
}

func (s *Server) handleSnowflake(w http.ResponseWriter, r *http.Request) {
	id, err := s.cfg.Snowflake.Next(r.Context())
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
	n, err := countParam(r.URL.RawQuery, s.cfg.MaxCount)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	ids, err := s.cfg.Snowflake.NextN(r.Context(), n)
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

// ParsedSnowflake is the reply of /snowflake/parse (and of `idmint snowflake
// parse`).
type ParsedSnowflake struct {
	ID       int64     `json:"id,string"`
	Time     time.Time `json:"time"`
	UnixMS   int64     `json:"unix_ms"`
	WorkerID int64     `json:"worker_id"`
	Sequence int64     `json:"sequence"`
	Layout   string    `json:"layout"`
	Epoch    time.Time `json:"epoch"`
}

// ParseSnowflake decodes the decimal ID s in layout l.
func ParseSnowflake(l snowflake.Layout, s string) (ParsedSnowflake, error) {
	p, err := l.ParseString(s)
	if err != nil {
		return ParsedSnowflake{}, err
	}
	return ParsedSnowflake{ID: p.ID, Time: p.Time, UnixMS: p.UnixMilli, WorkerID: p.Worker, Sequence: p.Sequence,
		Layout: l.Bits(), Epoch: l.Epoch.UTC()}, nil
}

func (s *Server) handleSnowflakeParse(w http.ResponseWriter, r *http.Request) {
	vals := r.URL.Query()["id"]
	if len(vals) != 1 {
		s.WriteError(w, r, requestError(wire.CodeInvalidID, "id is required once, e.g. /snowflake/parse?id=123456789"))
		return
	}
	p, err := ParseSnowflake(s.cfg.Snowflake.Layout(), vals[0])
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// SnowflakeHealth is the snowflake part of /id/health.
type SnowflakeHealth struct {
	Serving bool `json:"serving"`
	// State is "serving", or the error code a request would get now.
	State  string `json:"state"`
	Layout string `json:"layout"`
	Holder string `json:"holder"`
	// WorkerID is null while no worker ID is held.
	WorkerID         *int64     `json:"worker_id"`
	Epoch            int64      `json:"epoch"`
	LeaseRemainingMS float64    `json:"lease_remaining_ms"`
	WindowEnd        *time.Time `json:"window_end"`
	// WindowRemainingMS is how long Snowflake IDs can still be issued
	// without a renewal (0 when no window is held): during a database
	// outage, the time left before requests get snowflake_lease_expired.
	WindowRemainingMS float64  `json:"window_remaining_ms"`
	ClockOffsetMS     float64  `json:"clock_offset_ms"`
	Issued            int64    `json:"ids_issued"`
	SequenceWaits     int64    `json:"sequence_waits"`
	ClockWaits        int64    `json:"clock_waits"`
	Refused           int64    `json:"refused"`
	RefusedBy         Refusals `json:"refused_by"`
	Acquisitions      int64    `json:"acquisitions"`
	Renewals          int64    `json:"renewals"`
	RenewFailures     int64    `json:"renew_failures"`
	LeasesLost        int64    `json:"leases_lost"`
	LastError         string   `json:"last_error,omitempty"`
}

// Refusals counts refused snowflake requests by reason.
type Refusals struct {
	NoWorker      int64 `json:"no_worker"`
	LeaseExpired  int64 `json:"lease_expired"`
	ClockSkew     int64 `json:"clock_skew"`
	ClockBackward int64 `json:"clock_backwards"`
	TimeExhausted int64 `json:"time_exhausted"`
}

func snowflakeHealth(st snowflake.Stats) SnowflakeHealth {
	h := SnowflakeHealth{
		Serving:           st.Serving == nil,
		State:             "serving",
		Layout:            st.Layout.String(),
		Holder:            st.Holder,
		Epoch:             st.Epoch,
		LeaseRemainingMS:  ms(st.LeaseRemaining),
		WindowRemainingMS: ms(st.WindowRemaining),
		ClockOffsetMS:     ms(st.ClockOffset),
		Issued:            st.Issued,
		SequenceWaits:     st.SequenceWaits,
		ClockWaits:        st.ClockWaits,
		Refused:           st.Refused(),
		RefusedBy: Refusals{NoWorker: st.RefusedNoWorker, LeaseExpired: st.RefusedExpired, ClockSkew: st.RefusedSkew,
			ClockBackward: st.RefusedBackwards, TimeExhausted: st.RefusedExhausted},
		Acquisitions:  st.Acquisitions,
		Renewals:      st.Renewals,
		RenewFailures: st.RenewFailures,
		LeasesLost:    st.Losses,
	}
	if st.Serving != nil {
		h.State = lookup(st.Serving).code
	}
	if st.Worker >= 0 {
		w := st.Worker
		h.WorkerID = &w
		end := time.UnixMilli(st.Window.End).UTC()
		h.WindowEnd = &end
	}
	if st.LastError != nil {
		h.LastError = redact.Error(st.LastError)
	}
	return h
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

package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogConfig_Durations: a duration attribute reads as a Go duration
// string in JSON (not bare nanoseconds) and in text, at the top level, in a
// group and in attributes added by With.
func TestLogConfig_Durations(t *testing.T) {
	const d = 825160 * time.Nanosecond
	t.Run("json", func(t *testing.T) {
		var buf bytes.Buffer
		logger, err := (&logConfig{format: "json", level: "info"}).logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		logger.With("wait", 1500*time.Millisecond).Info("migration applied",
			"duration", d, slog.Group("phase", "took", 2*time.Second), "version", 7)
		var line struct {
			Duration any `json:"duration"`
			Wait     any `json:"wait"`
			Phase    struct {
				Took any `json:"took"`
			} `json:"phase"`
			Version any `json:"version"`
		}
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("decode %s: %v", buf.String(), err)
		}
		for _, c := range []struct {
			key  string
			got  any
			want time.Duration
		}{{"duration", line.Duration, d}, {"wait", line.Wait, 1500 * time.Millisecond}, {"phase.took", line.Phase.Took, 2 * time.Second}} {
			s, ok := c.got.(string)
			if !ok {
				t.Errorf("%s = %v (%T), want a duration string: %s", c.key, c.got, c.got, buf.String())
				continue
			}
			if got, err := time.ParseDuration(s); err != nil || got != c.want {
				t.Errorf("%s = %q, parses to %v (%v), want %v", c.key, s, got, err, c.want)
			}
		}
		if line.Version != float64(7) {
			t.Errorf("version = %v (%T), want the number 7 untouched", line.Version, line.Version)
		}
	})
	t.Run("text", func(t *testing.T) {
		var buf bytes.Buffer
		logger, err := (&logConfig{format: "text", level: "info"}).logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("migration applied", "duration", d)
		if out := buf.String(); !strings.Contains(out, "duration=825.16µs") {
			t.Errorf("text log: %s, want duration=825.16µs", out)
		}
	})
}

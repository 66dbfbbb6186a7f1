package segment_test

import (
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

func TestStepPolicy_Next(t *testing.T) {
	p := segment.StepPolicy{Min: 1000, Max: 100_000, Period: 15 * time.Minute}
	tests := []struct {
		name    string
		policy  segment.StepPolicy
		last    int64
		used    int64
		elapsed time.Duration
		want    int64
	}{
		{"lasted the period: keep", p, 5000, 5000, 15 * time.Minute, 5000},
		{"lasted a third: triple", p, 5000, 5000, 5 * time.Minute, 15000},
		{"bounded by max", p, 50_000, 50_000, time.Second, 100_000},
		{"grows at most 4x per load", p, 2000, 2000, time.Second, 8000},
		{"slow: at most halve", p, 8000, 10, time.Hour, 4000},
		{"idle: halve", p, 8000, 0, time.Hour, 4000},
		{"never below min", p, 1000, 1, time.Hour, 1000},
		{"no max uses the default", segment.StepPolicy{Min: 10, Period: time.Minute}, 900_000, 1e9, time.Second, segment.DefaultMaxStep},
		{"max below min uses min", segment.StepPolicy{Min: 50, Max: 10, Period: time.Minute}, 50, 1e6, time.Second, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Next(tt.last, tt.used, tt.elapsed); got != tt.want {
				t.Errorf("Next(%d, %d, %v) = %d, want %d", tt.last, tt.used, tt.elapsed, got, tt.want)
			}
		})
	}
}

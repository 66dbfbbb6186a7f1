package segment_test

import (
	"math"
	"testing"
	"time"

	"github.com/idmint/idmint/segment"
)

func TestStepPolicy_Next(t *testing.T) {
	p := segment.StepPolicy{Min: 1000, Max: 100_000, Period: 15 * time.Minute}
	small := segment.StepPolicy{Min: 10, Period: 15 * time.Minute}
	type sample = segment.Sample
	tests := []struct {
		name   string
		policy segment.StepPolicy
		last   int64
		s      sample
		want   int64
	}{
		{"lasted the period: keep", p, 5000, sample{Used: 5000, Elapsed: 15 * time.Minute}, 5000},
		{"lasted a third: triple", p, 5000, sample{Used: 5000, Elapsed: 5 * time.Minute}, 15000},
		{"bounded by max", p, 50_000, sample{Used: 50_000, Elapsed: time.Second}, 100_000},
		{"grows at most 4x per load", p, 2000, sample{Used: 2000, Elapsed: time.Second}, 8000},
		{"slow: at most halve", p, 8000, sample{Used: 10, Elapsed: time.Hour}, 4000},
		{"idle: halve", p, 8000, sample{Elapsed: time.Hour}, 4000},
		{"never below min", p, 1000, sample{Used: 1, Elapsed: time.Hour}, 1000},
		{"no max uses the default", segment.StepPolicy{Min: 10, Period: time.Minute}, 900_000, sample{Used: 1e9, Elapsed: time.Second}, segment.DefaultMaxStep},
		{"max below min uses min", segment.StepPolicy{Min: 50, Max: 10, Period: time.Minute}, 50, sample{Used: 1e6, Elapsed: time.Second}, 50},

		// Callers waited: the rate seen is a floor, grow up to 16x.
		{"starved: grows 16x", small, 10, sample{Used: 10, Elapsed: 20 * time.Millisecond, Starved: true}, 160},
		{"starved: still bounded by the period's need", small, 10, sample{Used: 10, Elapsed: time.Hour, Starved: true}, 10},
		{"starved: still bounded by max", segment.StepPolicy{Min: 10, Max: 100, Period: time.Minute}, 10, sample{Used: 10, Elapsed: time.Millisecond, Starved: true}, 100},
		{"starved: slow tag still halves", p, 8000, sample{Used: 10, Elapsed: time.Hour, Starved: true}, 4000},

		// The range covers 4 load latencies at the observed rate:
		// 50,000 IDs/s × 4 × 30 ms = 6,000, past the 4x limit of 40.
		{"covers the load latency", small, 10, sample{Used: 500, Elapsed: 10 * time.Millisecond, Latency: 30 * time.Millisecond}, 6000},
		{"cover below 4x: 4x", small, 1000, sample{Used: 500, Elapsed: 10 * time.Millisecond, Latency: 5 * time.Millisecond}, 4000},
		// 50,000 IDs/s with a 2 s latency: one second of the rate, not 8.
		{"cover at most 1s of the rate", small, 10, sample{Used: 500, Elapsed: 10 * time.Millisecond, Latency: 2 * time.Second}, 50_000},
		{"cover bounded by max", segment.StepPolicy{Min: 10, Max: 1000, Period: time.Minute}, 10, sample{Used: 500, Elapsed: 10 * time.Millisecond, Latency: 30 * time.Millisecond}, 1000},
		{"cover bounded by the period's need", segment.StepPolicy{Min: 10, Period: 50 * time.Millisecond}, 10, sample{Used: 500, Elapsed: 10 * time.Millisecond, Latency: 30 * time.Millisecond}, 2500},
		{"huge latency does not overflow", small, 10, sample{Used: 500, Elapsed: 10 * time.Millisecond, Latency: math.MaxInt64}, 50_000},
		{"huge last does not overflow", small, 1 << 62, sample{Used: 1 << 62, Elapsed: time.Nanosecond, Starved: true}, segment.DefaultMaxStep},
		// float64(2^63-1) is 2^63: converted back, it would wrap negative.
		{"max of 2^63-1 saturates", segment.StepPolicy{Min: 1, Max: math.MaxInt64, Period: time.Hour}, 1 << 62, sample{Used: 1 << 62, Elapsed: time.Nanosecond, Starved: true}, math.MaxInt64},
		{"max of 2^63-1, want past it", segment.StepPolicy{Min: 1, Max: math.MaxInt64, Period: time.Hour}, math.MaxInt64, sample{Used: math.MaxInt64, Elapsed: time.Nanosecond}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Next(tt.last, tt.s); got != tt.want {
				t.Errorf("Next(%d, %+v) = %d, want %d", tt.last, tt.s, got, tt.want)
			}
		})
	}
}

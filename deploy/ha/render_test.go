package ha

import (
	"errors"
	"testing"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name, tmpl string
		vars       map[string]string
		want       string
		err        error
	}{
		{name: "fills every placeholder", tmpl: "a: ${A}\nb: ${B_2}:${A}\n", vars: map[string]string{"A": "1", "B_2": "x"}, want: "a: 1\nb: x:1\n"},
		{name: "leaves other dollars alone", tmpl: "$A ${a} $${", vars: map[string]string{}, want: "$A ${a} $${"},
		{name: "missing placeholder", tmpl: "${A} ${B}", vars: map[string]string{"A": "1"}, err: ErrUnset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render([]byte(tt.tmpl), tt.vars)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && string(got) != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

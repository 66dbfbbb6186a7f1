package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestRedacting: serve's logs carry no connection details in errors, in
// JSON and text, in a record's attributes and in attributes added by With.
func TestRedacting(t *testing.T) {
	err := errors.New("failed to connect to `user=app database=prod`: 10.9.8.7:5432 (db.internal.example): dial error")
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		lc := logConfig{format: format, level: "info"}
		logger, e := lc.logger(&buf)
		if e != nil {
			t.Fatal(e)
		}
		logger.Warn("load failed", "err", err)
		logger.With("error", err.Error()).Info("again")
		out := buf.String()
		for _, secret := range []string{"app", "prod", "10.9.8.7", "5432", "db.internal"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s log shows %q: %s", format, secret, out)
			}
		}
		if !strings.Contains(out, "dial error") {
			t.Errorf("%s log lost the error itself: %s", format, out)
		}
	}
}

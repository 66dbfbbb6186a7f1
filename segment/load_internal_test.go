package segment

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestLoadRun_Step walks every answer a source can give from every state an
// ask can be in, and checks the next step: the protocol's whole table.
func TestLoadRun_Step(t *testing.T) {
	errAnswer := errors.New("the answer's error")
	tests := []struct {
		name  string
		state askState
		a     answer
		// want: the next step, the ask's state after, whether the next call
		// pauses first, and whether the step ended an attempt.
		want      loadStep
		wantState askState
		wantPause bool
		wantEnded bool
	}{
		{name: "a range is served", state: askNew, a: answerRange, want: stepServe, wantState: askNew},
		{name: "a range found by lookup is served", state: askUncertain, a: answerRange, want: stepServe, wantState: askUncertain},
		{name: "a refusal fails the load", state: askNew, a: answerRefused, want: stepFail, wantState: askNew},
		{name: "a refusal after a lost reply fails it, keeping the ask", state: askUncertain, a: answerRefused, want: stepFail, wantState: askUncertain},
		{name: "a refusal after already granted fails it, keeping the ask", state: askGranted, a: answerRefused, want: stepFail, wantState: askGranted},
		{name: "not held renews", state: askNew, a: answerNotHeld, want: stepRenew, wantState: askNew, wantEnded: true},
		{name: "not held after a lost reply renews", state: askUncertain, a: answerNotHeld, want: stepRenew, wantState: askUncertain, wantEnded: true},
		{name: "a settled gap renews", state: askUncertain, a: answerGap, want: stepRenew, wantState: askUncertain, wantEnded: true},
		{name: "not found after a lost reply is sent again at once", state: askUncertain, a: answerNotFound, want: stepGrant, wantState: askUncertain},
		{name: "not found after already granted is looked up again after a pause", state: askGranted, a: answerNotFound, want: stepLookup, wantState: askGranted, wantPause: true, wantEnded: true},
		{name: "already granted is looked up at once", state: askNew, a: answerAlreadyGranted, want: stepLookup, wantState: askGranted, wantEnded: true},
		{name: "already granted after a lost reply is looked up at once", state: askUncertain, a: answerAlreadyGranted, want: stepLookup, wantState: askGranted, wantEnded: true},
		{name: "a lost reply is looked up after a pause", state: askNew, a: answerAmbiguous, want: stepLookup, wantState: askUncertain, wantPause: true, wantEnded: true},
		{name: "a lost reply again is looked up again", state: askUncertain, a: answerAmbiguous, want: stepLookup, wantState: askUncertain, wantPause: true, wantEnded: true},
		{name: "a lost reply after already granted stays granted", state: askGranted, a: answerAmbiguous, want: stepLookup, wantState: askGranted, wantPause: true, wantEnded: true},
		{name: "a failure is sent again after a pause", state: askNew, a: answerFailed, want: stepGrant, wantState: askNew, wantPause: true, wantEnded: true},
		{name: "a failed lookup is looked up again after a pause", state: askUncertain, a: answerFailed, want: stepLookup, wantState: askUncertain, wantPause: true, wantEnded: true},
		{name: "a failed lookup after already granted is looked up again", state: askGranted, a: answerFailed, want: stepLookup, wantState: askGranted, wantPause: true, wantEnded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const before = 3
			l := loadRun{state: tt.state, attempt: before, pause: !tt.wantPause}
			got := l.step(tt.a, errAnswer)
			if got != tt.want || l.state != tt.wantState {
				t.Fatalf("step = %d, state %d; want %d, state %d", got, l.state, tt.want, tt.wantState)
			}
			if (got == stepGrant || got == stepLookup) && l.pause != tt.wantPause {
				t.Errorf("pause = %v, want %v", l.pause, tt.wantPause)
			}
			if ended := l.attempt == before+1; ended != tt.wantEnded || (!ended && l.attempt != before) {
				t.Errorf("attempts %d after %d, want one more: %v", l.attempt, before, tt.wantEnded)
			}
			if tt.wantEnded && got != stepRenew && !errors.Is(l.lastErr, errAnswer) {
				t.Errorf("last error %v, want the answer's", l.lastErr)
			}
			if got == stepFail && l.unsettled() != (tt.state != askNew) {
				t.Errorf("unsettled = %v at the failure from state %d", l.unsettled(), tt.state)
			}
		})
	}
}

// TestLoadRun_Renew: a new ask starts at once, with no error; a resumed one
// is looked up first; the attempts go on counting.
func TestLoadRun_Renew(t *testing.T) {
	for _, resumed := range []bool{false, true} {
		t.Run(fmt.Sprint("resumed=", resumed), func(t *testing.T) {
			l := loadRun{state: askGranted, attempt: 5, pause: true, lastErr: errors.New("before")}
			l.renew(Ask{Tag: "order"}, resumed)
			wantCall, wantState := stepGrant, askNew
			if resumed {
				wantCall, wantState = stepLookup, askUncertain
			}
			if l.ask.Tag != "order" || l.state != wantState || l.call() != wantCall || l.pause || l.lastErr != nil || l.attempt != 5 {
				t.Errorf("after renew: %+v, call %d; want state %d, call %d, no pause, no error, 5 attempts", l, l.call(), wantState, wantCall)
			}
			if l.unsettled() != resumed {
				t.Errorf("unsettled = %v, want %v", l.unsettled(), resumed)
			}
		})
	}
}

// TestLoadRun_PauseFor: the pause doubles with each attempt, from lo up to
// hi.
func TestLoadRun_PauseFor(t *testing.T) {
	lo, hi := 20*time.Millisecond, time.Second
	tests := []struct {
		attempt int
		want    time.Duration
	}{{0, lo}, {1, 2 * lo}, {3, 8 * lo}, {5, 640 * time.Millisecond}, {6, hi}, {100, hi}}
	for _, tt := range tests {
		l := loadRun{attempt: tt.attempt}
		if got := l.pauseFor(lo, hi); got != tt.want {
			t.Errorf("pauseFor after %d attempts = %v, want %v", tt.attempt, got, tt.want)
		}
	}
}

// TestAnswerOf classifies a source's errors as the load reads them.
func TestAnswerOf(t *testing.T) {
	plain := errors.New("connection refused")
	tests := []struct {
		name string
		step loadStep
		err  error
		want answer
	}{
		{"a range", stepGrant, nil, answerRange},
		{"a lookup's range", stepLookup, nil, answerRange},
		{"not found by lookup", stepLookup, Classify(ErrNotFound, plain), answerNotFound},
		{"not found bare", stepLookup, ErrNotFound, answerNotFound},
		{"a grant's not found is a failure", stepGrant, Classify(ErrNotFound, plain), answerFailed},
		{"not held", stepGrant, Classify(ErrNotHeld, plain), answerNotHeld},
		{"not held by lookup", stepLookup, Classify(ErrNotHeld, plain), answerNotHeld},
		{"already granted", stepGrant, Classify(ErrAlreadyGranted, plain), answerAlreadyGranted},
		{"refused", stepGrant, Classify(ErrRefused, ErrUnknownTag), answerRefused},
		{"ambiguous", stepGrant, Classify(ErrAmbiguous, plain), answerAmbiguous},
		{"wrapped ambiguous", stepLookup, fmt.Errorf("round: %w", Classify(ErrAmbiguous, plain)), answerAmbiguous},
		{"no class", stepGrant, plain, answerFailed},
		{"a deadline", stepLookup, context.DeadlineExceeded, answerFailed},
		// An error of two classes: not held wins over ambiguous, as the
		// load walks them.
		{"not held and ambiguous", stepGrant, Classify(ErrNotHeld, Classify(ErrAmbiguous, plain)), answerNotHeld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := answerOf(tt.step, tt.err); got != tt.want {
				t.Errorf("answerOf(%d, %v) = %d, want %d", tt.step, tt.err, got, tt.want)
			}
		})
	}
}

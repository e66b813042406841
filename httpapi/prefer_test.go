package httpapi

import (
	"testing"
	"time"
)

func TestPreferWait(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   time.Duration
		ok     bool
	}{
		{"absent", nil, 0, true},
		{"wait", []string{"wait=10"}, 10 * time.Second, true},
		{"zero", []string{"wait=0"}, 0, true},
		{"name case", []string{"Wait=5"}, 5 * time.Second, true},
		{"spaces around =", []string{"wait = 5"}, 5 * time.Second, true},
		{"quoted", []string{`wait="7"`}, 7 * time.Second, true},
		{"with other preferences", []string{"respond-async, wait=3, handling=lenient"}, 3 * time.Second, true},
		{"other preferences only", []string{"respond-async", "return=minimal"}, 0, true},
		{"malformed other preference ignored", []string{"=x;;, foo=\"a, wait=1\", wait=2"}, 2 * time.Second, true},
		{"parameters ignored", []string{"wait=4; foo=bar"}, 4 * time.Second, true},
		{"empty list elements", []string{", ,wait=6,"}, 6 * time.Second, true},
		{"over the cap is kept for the runner", []string{"wait=100"}, 100 * time.Second, true},
		{"beyond int64", []string{"wait=99999999999999999999999"}, maxPreferWait * time.Second, true},
		{"waiting is a different name", []string{"waiting=abc"}, 0, true},
		{"letters", []string{"wait=abc"}, 0, false},
		{"negative", []string{"wait=-1"}, 0, false},
		{"plus sign", []string{"wait=+1"}, 0, false},
		{"fraction", []string{"wait=1.5"}, 0, false},
		{"empty value", []string{"wait="}, 0, false},
		{"blank value", []string{"wait= "}, 0, false},
		{"no value", []string{"wait"}, 0, false},
		{"empty quoted", []string{`wait=""`}, 0, false},
		{"unit", []string{"wait=10s"}, 0, false},
		{"two in one header", []string{"wait=1, wait=2"}, 0, false},
		{"two headers", []string{"wait=1", "wait=1"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := preferWait(tt.values)
			if tt.ok != (err == nil) || got != tt.want {
				t.Fatalf("preferWait(%q) = %v, %v; want %v, ok %v", tt.values, got, err, tt.want, tt.ok)
			}
		})
	}
}

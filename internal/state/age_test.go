package state

import (
	"testing"
	"time"
)

func TestHumanAge(t *testing.T) {
	const (
		s   = time.Second
		min = time.Minute
		h   = time.Hour
		d   = 24 * time.Hour
	)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Hour, "just now"},
		{0, "just now"},
		{5*s - 1, "just now"},
		{5 * s, "5 seconds ago"},
		{12 * s, "12 seconds ago"},
		{min - 1, "59 seconds ago"},
		{min, "1 minute ago"},
		{2*min - 1, "1 minute ago"},
		{2 * min, "2 minutes ago"},
		{5 * min, "5 minutes ago"},
		{h - 1, "59 minutes ago"},
		{h, "1 hour ago"},
		{2 * h, "2 hours ago"},
		{d - 1, "23 hours ago"},
		{d, "1 day ago"},
		{3 * d, "3 days ago"},
		{7*d - 1, "6 days ago"},
		{7 * d, "1 week ago"},
		{14 * d, "2 weeks ago"},
		{30*d - 1, "4 weeks ago"},
		{30 * d, "1 month ago"},
		{4 * 30 * d, "4 months ago"},
		{365*d - 1, "12 months ago"},
		{365 * d, "1 year ago"},
		{2 * 365 * d, "2 years ago"},
		{100 * 365 * d, "100 years ago"},
	} {
		if got := HumanAge(tc.d); got != tc.want {
			t.Errorf("HumanAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

package state

import (
	"strconv"
	"time"
)

// HumanAge says how long ago something happened, the way people write it:
// "just now" (under 5 seconds, or in the future), "12 seconds ago",
// "1 minute ago", "5 minutes ago", "2 hours ago", "3 days ago",
// "2 weeks ago", "4 months ago", "2 years ago". Each unit is counted whole
// (rounded down); a month is 30 days and a year 365 days.
func HumanAge(d time.Duration) string {
	const (
		day   = 24 * time.Hour
		week  = 7 * day
		month = 30 * day
		year  = 365 * day
	)
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return ago(d/time.Second, "second")
	case d < time.Hour:
		return ago(d/time.Minute, "minute")
	case d < day:
		return ago(d/time.Hour, "hour")
	case d < week:
		return ago(d/day, "day")
	case d < month:
		return ago(d/week, "week")
	case d < year:
		return ago(d/month, "month")
	}
	return ago(d/year, "year")
}

func ago(n time.Duration, unit string) string {
	if n == 1 {
		return "1 " + unit + " ago"
	}
	return strconv.FormatInt(int64(n), 10) + " " + unit + "s ago"
}

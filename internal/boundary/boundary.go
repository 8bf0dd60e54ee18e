// Package boundary holds what every isolation backend reports in common.
package boundary

// Counters are cumulative resource-limit events for a sandbox's user
// processes. They let the host attribute a kill or a failed fork to the
// limit that caused it.
type Counters struct {
	OOMKills      uint64
	PidsLimitHits uint64
}

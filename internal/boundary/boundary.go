// Package boundary holds what every isolation backend reports in common.
package boundary

// Counters are cumulative resource-limit events for a sandbox's user
// processes. They let the host attribute a kill or a failed fork to the
// limit that caused it.
type Counters struct {
	OOMKills      uint64
	PidsLimitHits uint64
}

// Usage is what a sandbox's user processes use now, and the limit events
// so far, as its boundary measures them.
type Usage struct {
	CPUNanos        uint64
	MemoryBytes     uint64
	MemoryPeakBytes uint64 // 0 when not measured
	Pids            uint64
	OOMKills        uint64
	PidsLimitHits   uint64
}

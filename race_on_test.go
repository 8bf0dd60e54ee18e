//go:build race

package airlock_test

// raceEnabled scales memory bounds: the race detector's shadow memory
// multiplies this process's RSS.
const raceEnabled = true

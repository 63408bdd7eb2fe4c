//go:build race

package trainer

// raceEnabled says the tests run under the race detector.
const raceEnabled = true

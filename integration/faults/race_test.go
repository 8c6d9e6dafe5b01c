//go:build race

package faults

// raceEnabled: built with -race, clients included (they are this binary).
const raceEnabled = true

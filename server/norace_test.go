//go:build !race

package server_test

const raceAllocs = 0

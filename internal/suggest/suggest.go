// Package suggest finds the name a mistyped one probably meant, for "did
// you mean" hints: flags of the CLI, operation names of a catalog.
package suggest

import "strings"

// Closest returns the candidate nearest to name, case aside, when one is
// near enough to be a slip: at most 2 edits (a third of name's length for
// short names, at least 1), or a candidate that name (3 runes or more) is
// a prefix of. It returns "" when none is, or when two are
// equally near.
func Closest(name string, candidates []string) string {
	if name == "" {
		return ""
	}
	lower := strings.ToLower(name)
	limit := min(2, max(1, len([]rune(name))/3))
	best, bestD, tie := "", limit+1, false
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := distance(lower, lc)
		if d > limit && strings.HasPrefix(lc, lower) && len(lower) >= 3 {
			d = limit // an abbreviation counts as a slip
		}
		switch {
		case d < bestD:
			best, bestD, tie = c, d, false
		case d == bestD && c != best:
			tie = true
		}
	}
	if tie || bestD > limit {
		return ""
	}
	return best
}

// distance is the Levenshtein distance between a and b, in runes.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

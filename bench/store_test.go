package main

import "testing"

// Every request of first-2p refunds an order no other request refunds,
// while the phase sends fewer requests than orders were prepared.
func TestRefundOrdersAreEachRefundedOnce(t *testing.T) {
	const n = 10000
	for _, clients := range []int{1, 2, 16, 32} {
		seen := map[string]bool{}
		for w := 0; w < clients; w++ {
			for i := 0; i < n/clients; i++ {
				o := refundOrder(n, clients, w, i)
				if seen[o] {
					t.Fatalf("%d clients: client %d request %d refunds %s again", clients, w, i, o)
				}
				seen[o] = true
			}
		}
	}
}

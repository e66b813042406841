package main

import "testing"

func TestRefundOrdersAreTheClientsOwn(t *testing.T) {
	for _, clients := range []int{1, 2, 16, 32, 100} {
		owner := map[int]int{}
		for w := 0; w < clients; w++ {
			for i := 0; i < 1000; i++ {
				o := refundOrder(clients, w, i)
				if o < 1 || o > demoOrders {
					t.Fatalf("%d clients: client %d request %d refunds order %d, not a fixture order", clients, w, i, o)
				}
				if prev, ok := owner[o]; ok && prev != w {
					t.Fatalf("%d clients: order %d refunded by clients %d and %d", clients, o, prev, w)
				}
				owner[o] = w
			}
		}
		if want := demoOrders / clients * clients; len(owner) != want {
			t.Errorf("%d clients refund %d orders, want %d", clients, len(owner), want)
		}
	}
}

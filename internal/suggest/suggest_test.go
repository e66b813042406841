package suggest

import "testing"

func TestClosest(t *testing.T) {
	ops := []string{"business.create", "business.show", "order.refund", "order.show", "token.mint"}
	flags := []string{"addr", "store", "store-connect-timeout", "demo", "tokens-file"}
	for _, tc := range []struct {
		name       string
		in         string
		candidates []string
		want       string
	}{
		{"one letter dropped", "busines.create", ops, "business.create"},
		{"case", "Order.Refund", ops, "order.refund"},
		{"transposed", "ordre.show", ops, "order.show"},
		{"prefix of a flag", "store-connect", flags, "store-connect-timeout"},
		{"dropped letter in a flag", "adr", flags, "addr"},
		{"too far", "payout.create", ops, ""},
		{"exact", "demo", flags, "demo"},
		{"empty", "", ops, ""},
		{"tie", "order.shaw", []string{"order.show", "order.shew"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Closest(tc.in, tc.candidates); got != tc.want {
				t.Errorf("Closest(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

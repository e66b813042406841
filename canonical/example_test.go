package canonical_test

import (
	"fmt"
	"net/url"

	"github.com/idem-run/idem/canonical"
)

func ExampleTransform() {
	out, err := canonical.Transform([]byte(`{ "b": [3, 1.0], "a": "\u00e9", "c": 1e21 }`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))

	_, err = canonical.Transform([]byte(`{"a": 1, "a": 2}`))
	fmt.Println(err)
	// Output:
	// {"a":"é","b":[3,1],"c":1e+21}
	// canonical: duplicate key "a" at offset 9
}

func ExampleFingerprint() {
	query, _ := url.ParseQuery("reason=duplicate&amount=10.00&reason=late")
	fp, err := canonical.Fingerprint(canonical.Request{
		Method: "POST",
		Path:   "/v1/orders/ord_1/refund",
		Query:  query,
		Body:   []byte(`{ "currency": "EUR", "amount": 10.0 }`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fp)
	// Output:
	// c96840512f81601bfa8f9f4777d562145d9d9573099dcb473422c7b8106df608
}

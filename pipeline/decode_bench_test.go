package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

type bulkItem struct {
	A int64  `json:"a"`
	B string `json:"b"`
}

type bulkIn struct {
	Items []bulkItem `json:"items"`
}

// bulkBody is {"items":[{"a":N,"b":"x"},…]} of just under n bytes.
func bulkBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < n-20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"a":%d,"b":"x"}`, i%10)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// BenchmarkLargeBody measures what one valid body of the 1 MiB limit, made
// of many small objects, costs a keyed call end to end (fingerprint,
// decode, schema validation, the Go value, reservation, completion): B/op
// over the body size is the decode amplification that admission control
// budgets for (docs/PERFORMANCE.md, "Admission control and memory").
func BenchmarkLargeBody(b *testing.B) {
	meta := createMeta()
	meta.Name, meta.Path = "bulk.create", "/v1/bulk"
	op := idem.Define(meta, func(ctx context.Context, call *idem.Call, in bulkIn) (struct {
		N int `json:"n"`
	}, error) {
		return struct {
			N int `json:"n"`
		}{len(in.Items)}, nil
	})
	reg, err := idem.NewRegistry(op, showOp())
	if err != nil {
		b.Fatal(err)
	}
	r, err := pipeline.New(reg, pipeline.Config{Store: newSQLiteStore(b, idem.SystemClock{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	body := bulkBody(1 << 20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		resp := r.Call(b.Context(), idem.Invocation{Operation: "bulk.create", Principal: agent, Key: fmt.Sprint("k", i), Intent: idem.Intent{Body: body}})
		if resp.Status != 201 {
			b.Fatalf("status %d: %.200s", resp.Status, resp.Body())
		}
	}
}

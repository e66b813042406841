package webui

import (
	"net/http"

	"github.com/idem-run/idem"
)

// catalog shows every operation's side effect and retry contract side by
// side, from the Runner's descriptors.
func (c *console) catalog(w http.ResponseWriter, r *http.Request, sess *session) {
	c.render(w, r, http.StatusOK, "catalog", sess, c.cfg.Runner.Descriptors())
}

// kindHelp says in a line what each retry kind means for a caller.
var kindHelp = map[idem.RetryKind]string{
	idem.RetryFreshRead:        "retry freely: every answer is current state",
	idem.RetrySameKeyReplay:    "retry with the same key: the first result is replayed",
	idem.RetryConvergent:       "retry freely: the same input converges on one resource",
	idem.RetryIntrinsicReplay:  "retry freely: the server derives the transition once",
	idem.RetryNoAutomaticRetry: "never retry automatically: each call is a new effect",
	idem.RetryPreview:          "retry freely: nothing is changed",
}

package demo

import (
	"net/http"

	"github.com/idem-run/idem"
)

// The business codes of the reference application: outcomes its handlers
// return and its operations declare (Metadata.Errors), beside idem's own
// codes. The package registers them with idem when it is initialised
// (idem.RegisterCodes), so that idem.Errorf and idem.Declare give them
// their status and their problems carry their title. docs/demo.md lists
// them; a test keeps it in step with the table below.
const (
	// CodeBusinessExists: business.create under a slug the org has already.
	CodeBusinessExists idem.Code = "BUSINESS_EXISTS"
	// CodeAlreadyRefunded: order.refund over the amount left to refund.
	CodeAlreadyRefunded idem.Code = "ALREADY_REFUNDED"
	// CodeLimitConflict: limit.create for a subject whose limit differs.
	CodeLimitConflict idem.Code = "LIMIT_CONFLICT"
)

// codeTable is what the demo's codes mean on the wire.
var codeTable = map[idem.Code]idem.CodeInfo{
	CodeBusinessExists:  {Status: http.StatusConflict, Retryable: false, Title: "Business exists", Action: "A business with this slug already exists in the org; choose another slug or use business.show."},
	CodeAlreadyRefunded: {Status: http.StatusConflict, Retryable: false, Title: "Already refunded", Action: "The order has no refundable amount left; run order.show to see its refunds."},
	CodeLimitConflict:   {Status: http.StatusConflict, Retryable: false, Title: "Limit conflict", Action: "A limit for this subject exists and differs (details.current); change it with limit.update."},
}

func init() { idem.RegisterCodes(codeTable) }

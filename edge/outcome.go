package edge

// An Outcome is what an edge did with a request, for its decision hooks and metrics.
type Outcome uint8

const (
	Admitted      Outcome = iota + 1 // the limiter admitted it
	Refused                          // the limiter refused it: answered with its wait
	DryRunRefused                    // the limiter refused it, and a dry run passed it on
	Exempt                           // the edge's exemption passed it on, uncounted
	FailedOpen                       // the key function or the limiter failed: admitted uncounted
	FailedClosed                     // the key function or the limiter failed: refused
)

// String returns the outcome's name in snake case, as metrics name it: "admitted", "refused",
// "dry_run_refused", "exempt", "failed_open", "failed_closed".
func (o Outcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case Refused:
		return "refused"
	case DryRunRefused:
		return "dry_run_refused"
	case Exempt:
		return "exempt"
	case FailedOpen:
		return "failed_open"
	case FailedClosed:
		return "failed_closed"
	}
	return "unknown"
}

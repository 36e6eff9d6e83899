package retryaftercaddy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/retryafter/retryafter"
)

func init() {
	caddy.RegisterModule(MaintenanceAdmin{})
}

// maintenanceSwitch is a maintenance window: on, and until when, and whether it holds past its
// until.
type maintenanceSwitch struct {
	m     retryafter.Maintenance
	mu    sync.Mutex                  // held across a change of state and m, so that m ends as state says
	state atomic.Pointer[switchValue] // nil while off
}

// switchValue is the state of a switch that is on: a change replaces it whole.
type switchValue struct {
	until time.Time // the zero time: no end
	hold  bool
}

// Destruct implements caddy.Destructor: there is nothing to close.
func (*maintenanceSwitch) Destruct() error { return nil }

// set turns the switch on with v, or off when v is nil, in one step: of two changes at once,
// the switch ends as one of them set it, until and hold together.
func (s *maintenanceSwitch) set(v *switchValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == nil {
		s.m.Stop()
	} else {
		s.m.Start(v.until)
	}
	s.state.Store(v)
}

// over reports whether the window has reached its until at now without hold: it is over, and
// requests pass.
func (s *maintenanceSwitch) over(now time.Time) bool {
	v := s.state.Load()
	return v != nil && !v.until.IsZero() && !v.hold && !now.Before(v.until)
}

// switches holds the maintenance switches that the admin API turns on and off, by name, for
// the handlers of the running configurations, so that a switch keeps its state across
// configuration loads; a name is deleted with the last handler that uses it.
var switches = caddy.NewUsagePool()

// shareSwitch finds the switch h.MaintenanceSwitch names in [switches], or makes it, off;
// [Limit.Cleanup] gives it back.
func (h *Limit) shareSwitch() error {
	v, _, err := switches.LoadOrNew(h.MaintenanceSwitch, func() (caddy.Destructor, error) {
		s := new(maintenanceSwitch)
		s.m.Now = h.now
		return s, nil
	})
	if err != nil {
		return err
	}
	h.maint, h.switchKey = v.(*maintenanceSwitch), h.MaintenanceSwitch
	return nil
}

// MaintenanceAdmin is the admin API module admin.api.retry_after_maintenance: it turns the
// maintenance switches of retry_after_limit (its maintenance_switch option) on and off without
// a reload, at /retry-after/maintenance/<name> of Caddy's admin endpoint:
//
//	POST   turns the switch on; an optional JSON body {"until": "2030-06-01T22:00:00Z", "hold": true}
//	       announces the end (maintenance ends there by itself, unless hold) as the
//	       maintenance option's until and hold do
//	DELETE turns it off
//	GET    reports it: {"on": true, "until": "...", "hold": false}
//
// A POST body is one JSON object with until, hold, both or neither, and nothing after it; any
// other body (another field, a value of another type, a second object) is answered 400 with
// why, and the switch is left as it was. A name that no handler of the running configuration
// uses is answered 404.
type MaintenanceAdmin struct{}

// CaddyModule returns the Caddy module information.
func (MaintenanceAdmin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.retry_after_maintenance",
		New: func() caddy.Module { return new(MaintenanceAdmin) },
	}
}

// switchPath is the path of the switches on the admin endpoint, a name after it.
const switchPath = "/retry-after/maintenance/"

// Routes returns the admin endpoint's route to the switches.
func (MaintenanceAdmin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: switchPath, Handler: caddy.AdminHandlerFunc(serveSwitch)}}
}

// switchState is what the admin API reports of a switch.
type switchState struct {
	On    bool   `json:"on"`
	Until string `json:"until,omitempty"`
	Hold  bool   `json:"hold,omitempty"`
}

// switchPost is the body of a POST to a switch.
type switchPost struct {
	Until string `json:"until"`
	Hold  bool   `json:"hold"`
}

// readPost reads the body of a POST to a switch: no body, or one JSON object of switchPost's
// fields and nothing after it.
func readPost(body io.Reader) (*switchValue, error) {
	const want = `want one JSON object such as {"until": "2030-06-01T22:00:00Z", "hold": true}, or no body (DELETE turns the switch off)`
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var p *switchPost
	switch err := dec.Decode(&p); {
	case errors.Is(err, io.EOF):
		return new(switchValue), nil
	case err != nil:
		return nil, fmt.Errorf("%s: %v", want, err)
	case p == nil:
		return nil, fmt.Errorf("%s: got null", want)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: got more after the object", want)
	}
	until, err := parseUntil(p.Until)
	if err != nil {
		return nil, err
	}
	return &switchValue{until: until, hold: p.Hold}, nil
}

// serveSwitch answers a request of the admin API for the switch its path names.
func serveSwitch(w http.ResponseWriter, r *http.Request) error {
	name := strings.TrimPrefix(r.URL.Path, switchPath)
	var s *maintenanceSwitch
	switches.Range(func(k, v any) bool {
		if k == name {
			s = v.(*maintenanceSwitch)
		}
		return s == nil
	})
	if s == nil {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no retry_after_limit has the maintenance_switch %q", name)}
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		v, err := readPost(http.MaxBytesReader(w, r.Body, 1<<10))
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
		}
		s.set(v)
	case http.MethodDelete:
		s.set(nil)
	default:
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s: want GET, POST or DELETE", r.Method)}
	}
	var st switchState
	if v := s.state.Load(); v != nil {
		st = switchState{On: true, Hold: v.hold}
		if !v.until.IsZero() {
			st.Until = v.until.UTC().Format(time.RFC3339)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(st)
}

// Interface guards.
var _ caddy.AdminRouter = MaintenanceAdmin{}

package retryaftercaddy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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
	m    retryafter.Maintenance
	hold atomic.Bool
}

// Destruct implements caddy.Destructor: there is nothing to close.
func (*maintenanceSwitch) Destruct() error { return nil }

// over reports whether the window has reached its until at now without hold: it is over, and
// requests pass.
func (s *maintenanceSwitch) over(now time.Time) bool {
	until, on := s.m.Until()
	return on && !until.IsZero() && !s.hold.Load() && !now.Before(until)
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
// A name that no handler of the running configuration uses is answered 404.
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

// switchState is what the admin API reads and writes of a switch.
type switchState struct {
	On    bool   `json:"on"`
	Until string `json:"until,omitempty"`
	Hold  bool   `json:"hold,omitempty"`
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
		var want switchState
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&want); err != nil && !errors.Is(err, io.EOF) {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("want a JSON body such as {\"until\": \"2030-06-01T22:00:00Z\"}: %v", err)}
		}
		until, err := parseUntil(want.Until)
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
		}
		s.hold.Store(want.Hold)
		s.m.Start(until)
	case http.MethodDelete:
		s.m.Stop()
	default:
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s: want GET, POST or DELETE", r.Method)}
	}
	until, on := s.m.Until()
	st := switchState{On: on, Hold: s.hold.Load()}
	if !until.IsZero() {
		st.Until = until.UTC().Format(time.RFC3339)
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(st)
}

// Interface guards.
var _ caddy.AdminRouter = MaintenanceAdmin{}

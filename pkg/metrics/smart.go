// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidecache/tidecache/pkg/command"
	"github.com/tidecache/tidecache/pkg/engine"
)

// SSDHealth is what the SSD's own health log says about it.
type SSDHealth struct {
	Path   string // device path as the SSD source was given it
	Model  string
	Serial string
	// WearPercent is the share of rated endurance used (NVMe "percentage
	// used", smartctl "endurance_used"); it may exceed 100. nil when the
	// device does not report it.
	WearPercent *int
	// MediaErrors counts unrecovered data-integrity errors (NVMe "media
	// and data integrity errors"; ATA attribute 187, Reported_Uncorrect).
	MediaErrors uint64
	// ErrorLogEntries counts the entries of the device's error log over
	// its life.
	ErrorLogEntries uint64
	// CriticalWarning: the NVMe critical-warning byte is not 0 (spare
	// below threshold, temperature, reliability degraded, read-only,
	// volatile backup failed), or the ATA SMART overall status failed.
	CriticalWarning bool
}

// SSDSource reports the health of the node's SSDs. It is called once per
// scrape (a SmartSource answers from what it read within MaxAge). An SSD whose health cannot be read because no tool for it is
// installed is left out, not an error; a partial list comes with an error
// naming the SSDs that failed.
type SSDSource interface {
	SSDs(ctx context.Context) ([]SSDHealth, error)
}

// Runner runs a program and returns its standard output; on a non-zero
// exit it returns the output too, with a *command.ExitError.
// command.Runner implements it.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// SmartSource reads SSD health with nvme-cli (NVMe devices, when
// installed) or smartctl (any device, when installed).
//
// It reads each device at most once per MaxAge and answers from that
// reading in between: health logs change over hours, and a scrape (which
// anyone who reaches the metrics port can send) or an inventory round must
// not start a tool per SSD each time. Concurrent calls wait for one
// reading. Use a SmartSource by pointer; its zero value is ready.
type SmartSource struct {
	// Runner runs the tools; nil means command.Runner{}.
	Runner Runner
	// Devices lists the SSDs to read, e.g. the members of the node's
	// pools ("/dev/nvme0n1").
	Devices func(ctx context.Context) ([]string, error)
	// MaxAge is how old a reading may be before the device is read
	// again; 0 means DefaultSmartMaxAge, a negative value reads every
	// time.
	MaxAge time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu   sync.Mutex
	last map[string]smartReading
}

// DefaultSmartMaxAge is how often a SmartSource reads an SSD's health log
// at most.
const DefaultSmartMaxAge = 5 * time.Minute

// smartReading is one device's last health reading.
type smartReading struct {
	health SSDHealth
	err    error
	at     time.Time
}

// errUnsupported: no installed tool can read this device's health.
var errUnsupported = errors.New("no tool can read its health")

// SSDs reads every device Devices lists.
func (s *SmartSource) SSDs(ctx context.Context) ([]SSDHealth, error) {
	if s.Devices == nil {
		return nil, nil
	}
	devs, err := s.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("list SSDs: %w", err)
	}
	return s.Read(ctx, devs)
}

// Read reads the health of the devices given, skipping those no
// installed tool can read.
func (s *SmartSource) Read(ctx context.Context, devs []string) ([]SSDHealth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	maxAge := s.MaxAge
	if maxAge == 0 {
		maxAge = DefaultSmartMaxAge
	}
	if s.last == nil {
		s.last = map[string]smartReading{}
	}
	var out []SSDHealth
	var errs []error
	for _, dev := range devs {
		r, ok := s.last[dev]
		if !ok || maxAge < 0 || now().Sub(r.at) >= maxAge {
			r.health, r.err = s.read(ctx, dev)
			r.at = now()
			if ctx.Err() == nil { // a reading cut short is not kept
				s.last[dev] = r
			}
		}
		h, err := r.health, r.err
		switch {
		case errors.Is(err, errUnsupported):
		case err != nil:
			errs = append(errs, fmt.Errorf("SSD %s: %w", dev, err))
		default:
			out = append(out, h)
		}
	}
	for dev := range s.last {
		if !slices.Contains(devs, dev) {
			delete(s.last, dev) // no longer a pool's SSD
		}
	}
	return out, errors.Join(errs...)
}

// SSDPaths lists the present SSD members of pools, the devices whose
// health tidecache watches.
func SSDPaths(pools []engine.PoolInfo) []string {
	var out []string
	for _, p := range pools {
		for _, m := range p.Members {
			if m.Present {
				out = append(out, m.Path)
			}
		}
	}
	return out
}

func (s *SmartSource) runner() Runner {
	if s.Runner == nil {
		return command.Runner{}
	}
	return s.Runner
}

// read tries nvme-cli for NVMe devices, then smartctl.
func (s *SmartSource) read(ctx context.Context, dev string) (SSDHealth, error) {
	if strings.HasPrefix(filepath.Base(dev), "nvme") {
		h, err := s.readNVMe(ctx, dev)
		if !errors.Is(err, command.ErrNotFound) {
			return h, err
		}
	}
	h, err := s.readSmartctl(ctx, dev)
	if errors.Is(err, command.ErrNotFound) {
		return SSDHealth{}, fmt.Errorf("%w: %w", errUnsupported, err)
	}
	return h, err
}

func (s *SmartSource) readNVMe(ctx context.Context, dev string) (SSDHealth, error) {
	out, err := s.runner().Run(ctx, "nvme", "smart-log", "-o", "json", dev)
	if err != nil {
		return SSDHealth{}, err
	}
	h, err := ParseNVMeSmartLog(out)
	if err != nil {
		return SSDHealth{}, err
	}
	out, err = s.runner().Run(ctx, "nvme", "id-ctrl", "-o", "json", dev)
	if err != nil {
		return SSDHealth{}, err
	}
	if h.Model, h.Serial, err = ParseNVMeIDCtrl(out); err != nil {
		return SSDHealth{}, err
	}
	h.Path = dev
	return h, nil
}

func (s *SmartSource) readSmartctl(ctx context.Context, dev string) (SSDHealth, error) {
	out, err := s.runner().Run(ctx, "smartctl", "--json", "-a", dev)
	var ee *command.ExitError
	if err != nil && !(errors.As(err, &ee) && len(out) > 0) {
		return SSDHealth{}, err
	}
	// smartctl's exit status is a bit mask; from bit 2 on it reports the
	// device's health, with the JSON complete. ParseSmartctl checks the
	// status the JSON repeats.
	h, perr := ParseSmartctl(out)
	if perr != nil {
		return SSDHealth{}, perr
	}
	h.Path = dev
	return h, nil
}

// ParseNVMeSmartLog parses `nvme smart-log -o json` (nvme-cli 1.x and 2.x:
// 128-bit counters are JSON numbers in 1.x, strings in 2.x; the critical
// warning is a number, or an object with "value" in verbose output).
// Model, Serial and Path are left empty.
func ParseNVMeSmartLog(data []byte) (SSDHealth, error) {
	var l struct {
		CriticalWarning *criticalWarning `json:"critical_warning"`
		PercentUsed     *jsonUint        `json:"percent_used"`
		PercentageUsed  *jsonUint        `json:"percentage_used"`
		MediaErrors     jsonUint         `json:"media_errors"`
		ErrLogEntries   jsonUint         `json:"num_err_log_entries"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return SSDHealth{}, fmt.Errorf("nvme smart-log: %w", err)
	}
	if l.CriticalWarning == nil {
		return SSDHealth{}, errors.New("nvme smart-log: no critical_warning field")
	}
	h := SSDHealth{
		CriticalWarning: *l.CriticalWarning != 0,
		MediaErrors:     uint64(l.MediaErrors),
		ErrorLogEntries: uint64(l.ErrLogEntries),
	}
	switch {
	case l.PercentUsed != nil:
		h.WearPercent = percent(*l.PercentUsed)
	case l.PercentageUsed != nil:
		h.WearPercent = percent(*l.PercentageUsed)
	}
	return h, nil
}

// ParseNVMeIDCtrl returns the model and serial number from `nvme id-ctrl
// -o json` (fields mn and sn, space-padded by the controller).
func ParseNVMeIDCtrl(data []byte) (model, serial string, err error) {
	var id struct {
		MN string `json:"mn"`
		SN string `json:"sn"`
	}
	if err := json.Unmarshal(data, &id); err != nil {
		return "", "", fmt.Errorf("nvme id-ctrl: %w", err)
	}
	model, serial = strings.TrimSpace(id.MN), strings.TrimSpace(id.SN)
	if model == "" && serial == "" {
		return "", "", errors.New("nvme id-ctrl: no mn or sn field")
	}
	return model, serial, nil
}

// smartctl exit status bits that mean it read nothing.
const (
	smartctlBadCommandLine = 1 << 0
	smartctlOpenFailed     = 1 << 1 // or the device type is unknown
)

// ParseSmartctl parses `smartctl --json -a` for NVMe and ATA devices.
// Path is left empty. A device smartctl could not open or identify is an
// error; one whose type it does not know wraps errUnsupported.
func ParseSmartctl(data []byte) (SSDHealth, error) {
	var s struct {
		Smartctl *struct {
			ExitStatus int `json:"exit_status"`
			Messages   []struct {
				String string `json:"string"`
			} `json:"messages"`
		} `json:"smartctl"`
		ModelName    string `json:"model_name"`
		SerialNumber string `json:"serial_number"`
		SmartStatus  *struct {
			Passed *bool `json:"passed"`
		} `json:"smart_status"`
		NVMe *struct {
			CriticalWarning criticalWarning `json:"critical_warning"`
			PercentageUsed  *jsonUint       `json:"percentage_used"`
			MediaErrors     jsonUint        `json:"media_errors"`
			ErrLogEntries   jsonUint        `json:"num_err_log_entries"`
		} `json:"nvme_smart_health_information_log"`
		EnduranceUsed *struct {
			CurrentPercent *jsonUint `json:"current_percent"`
		} `json:"endurance_used"`
		ATAErrorLog *struct {
			Summary struct {
				Count jsonUint `json:"count"`
			} `json:"summary"`
		} `json:"ata_smart_error_log"`
		ATAAttributes *struct {
			Table []struct {
				ID  int `json:"id"`
				Raw struct {
					Value jsonUint `json:"value"`
				} `json:"raw"`
			} `json:"table"`
		} `json:"ata_smart_attributes"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return SSDHealth{}, fmt.Errorf("smartctl: %w", err)
	}
	if s.Smartctl == nil {
		return SSDHealth{}, errors.New("smartctl: no smartctl section: not smartctl --json output")
	}
	if st := s.Smartctl.ExitStatus; st&(smartctlBadCommandLine|smartctlOpenFailed) != 0 {
		var msgs []string
		for _, m := range s.Smartctl.Messages {
			msgs = append(msgs, m.String)
		}
		err := fmt.Errorf("smartctl: exit status %d: %s", st, strings.Join(msgs, "; "))
		if strings.Contains(strings.Join(msgs, " "), "Unable to detect device type") {
			err = fmt.Errorf("%w: %w", errUnsupported, err)
		}
		return SSDHealth{}, err
	}
	h := SSDHealth{Model: strings.TrimSpace(s.ModelName), Serial: strings.TrimSpace(s.SerialNumber)}
	if s.SmartStatus != nil && s.SmartStatus.Passed != nil && !*s.SmartStatus.Passed {
		h.CriticalWarning = true
	}
	if s.EnduranceUsed != nil && s.EnduranceUsed.CurrentPercent != nil {
		h.WearPercent = percent(*s.EnduranceUsed.CurrentPercent)
	}
	switch {
	case s.NVMe != nil:
		h.CriticalWarning = h.CriticalWarning || s.NVMe.CriticalWarning != 0
		if s.NVMe.PercentageUsed != nil {
			h.WearPercent = percent(*s.NVMe.PercentageUsed)
		}
		h.MediaErrors = uint64(s.NVMe.MediaErrors)
		h.ErrorLogEntries = uint64(s.NVMe.ErrLogEntries)
	case s.ATAAttributes != nil || s.ATAErrorLog != nil:
		if s.ATAErrorLog != nil {
			h.ErrorLogEntries = uint64(s.ATAErrorLog.Summary.Count)
		}
		if s.ATAAttributes != nil {
			for _, a := range s.ATAAttributes.Table {
				if a.ID == 187 { // Reported_Uncorrect
					h.MediaErrors = uint64(a.Raw.Value)
				}
			}
		}
	}
	return h, nil
}

func percent(v jsonUint) *int {
	p := int(min(uint64(v), math.MaxInt32))
	return &p
}

// jsonUint is an unsigned counter printed as a JSON number or as a string
// holding one (nvme-cli 2.x prints 128-bit counters as strings, 1.x as
// numbers that may carry an exponent). Values beyond 64 bits saturate.
type jsonUint uint64

func (u *jsonUint) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(uq)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err == nil {
		*u = jsonUint(v)
		return nil
	}
	if errors.Is(err, strconv.ErrRange) {
		*u = math.MaxUint64
		return nil
	}
	f, ferr := strconv.ParseFloat(s, 64)
	if ferr != nil || f < 0 || math.IsNaN(f) {
		return fmt.Errorf("counter %s: not an unsigned number", b)
	}
	if f >= math.MaxUint64 {
		*u = math.MaxUint64
	} else {
		*u = jsonUint(f)
	}
	return nil
}

// criticalWarning is the NVMe critical-warning byte: a number, or with
// nvme-cli's verbose/human output an object whose "value" holds it.
type criticalWarning uint64

func (c *criticalWarning) UnmarshalJSON(b []byte) error {
	var obj struct {
		Value jsonUint `json:"value"`
	}
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &obj); err != nil {
			return err
		}
		*c = criticalWarning(obj.Value)
		return nil
	}
	var v jsonUint
	if err := v.UnmarshalJSON(b); err != nil {
		return err
	}
	*c = criticalWarning(v)
	return nil
}

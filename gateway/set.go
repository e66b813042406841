package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/gatewayconfig"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/mcpserver"
	"github.com/idem-run/idem/proxy"
)

// SetOptions configure a Set.
type SetOptions struct {
	// Logger receives the upstreams' events (redact its credentials
	// before: gatewayconfig.Config.Redact); none when nil.
	Logger *slog.Logger
	// Version names the gateway in the MCP handshake and the OpenAPI
	// document.
	Version string
	// Environ is the gateway's environment, from which a spawned
	// upstream gets the allow-list (gatewayconfig.Upstream.Environ).
	Environ []string
	// Backoff bounds the wait between two attempts to reach an upstream
	// that is down (first 1 s, doubling; DefaultBackoffCap when 0).
	Backoff time.Duration
	// MaxResultBytes bounds one MCP upstream answer
	// (UpstreamConfig.MaxResultBytes).
	MaxResultBytes int64
}

// DefaultBackoffCap is the longest wait between two attempts to reach an
// upstream that is down.
const DefaultBackoffCap = 30 * time.Second

// Set is the upstreams of one gateway (SPEC §17.1): MCP servers and HTTP
// APIs, each reached on its own and served side by side as one set of
// operations. An upstream that is down at start or later is retried in
// the background with capped backoff while the others serve; its tools
// answer 503 UPSTREAM_UNAVAILABLE. Changed reports when what the set
// serves may have changed (an upstream's tools/list_changed, an upstream
// that came up): declare again then.
type Set struct {
	opts    SetOptions
	log     *slog.Logger
	changed chan struct{}

	mu      sync.Mutex
	members map[string]*member  // by upstream name, the committed ones
	listed  func(method string) // the served list_changed (Forwarder)
}

// listChanged passes an upstream's resources or prompts list_changed on.
func (s *Set) listChanged(method string) {
	s.mu.Lock()
	f := s.listed
	s.mu.Unlock()
	if f != nil {
		f(method)
	}
}

// serves reports whether m is a member of the committed config.
func (s *Set) serves(m *member) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[m.cfg.Name] == m
}

// NewSet makes an empty Set; Declare fills it.
func NewSet(opts SetOptions) *Set {
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoffCap
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{opts: opts, log: log, changed: make(chan struct{}, 1), members: map[string]*member{}}
}

// Changed fires when the set should be declared again.
func (s *Set) Changed() <-chan struct{} { return s.changed }

func (s *Set) signal() {
	select {
	case s.changed <- struct{}{}:
	default: // one declaration is already due
	}
}

// Declaration is what Declare built, not yet served.
type Declaration struct {
	Operations []idem.Operation
	// OpenAPI is the document of all the operations.
	OpenAPI []byte
	// Warnings are for the log, each naming its upstream.
	Warnings []string
	set      *Set
	next     map[string]*member
	started  []*member // made for this declaration
	done     bool

	// Upstreams maps each served name to the name of the upstream that
	// serves it (prefix: false too), as the config declares it.
	Upstreams map[string]string
}

// Commit makes d's upstreams the set's, once its operations are served:
// the upstreams no longer configured are closed once their calls in
// flight have finished.
func (d *Declaration) Commit() {
	if d.done {
		return
	}
	d.done = true
	s := d.set
	s.mu.Lock()
	old := s.members
	s.members = d.next
	s.mu.Unlock()
	for _, m := range d.next {
		m.mu.Lock()
		if m.pending != nil {
			m.doc, m.pending = m.pending, nil
		}
		m.mu.Unlock()
	}
	changed := false
	for name, m := range old {
		if d.next[name] != m {
			m.retire()
			changed = changed || m.cfg.Kind == gatewayconfig.KindMCP
		}
	}
	for name, m := range d.next {
		changed = changed || (old[name] != m && m.cfg.Kind == gatewayconfig.KindMCP)
	}
	if changed {
		// The resources and prompts served are those of other upstreams
		// now: the clients hear of it as of an upstream's own change.
		s.listChanged("notifications/resources/list_changed")
		s.listChanged("notifications/prompts/list_changed")
	}
}

// Abort closes what Declare started for d, which is not served.
func (d *Declaration) Abort() {
	if d.done {
		return
	}
	d.done = true
	for _, m := range d.next {
		m.mu.Lock()
		m.pending = nil
		m.mu.Unlock()
	}
	for _, m := range d.started {
		m.retire()
	}
}

// Declare builds the operations of cfg's upstreams: the running ones
// whose configuration did not change are kept, the others are started
// (an MCP upstream connected, a document read; one that cannot be is
// down, retried in the background, and serves no operation until it
// answers). It refuses, and starts nothing it keeps, when a served name
// is given by two upstreams, or an overlay or document is wrong. The
// result is served by the caller, then committed (or aborted).
func (s *Set) Declare(ctx context.Context, cfg *gatewayconfig.Config) (*Declaration, error) {
	d := &Declaration{set: s, next: map[string]*member{}}
	s.mu.Lock()
	current := maps.Clone(s.members)
	s.mu.Unlock()
	// Upstreams are reached, then listed, all at once: one that hangs
	// costs its own timeout, not every other's.
	members := make([]*member, len(cfg.Upstreams))
	errs := make([]error, len(cfg.Upstreams))
	var wg sync.WaitGroup
	for i, u := range cfg.Upstreams {
		if m := current[u.Name]; m != nil && m.cfg.Fingerprint == u.Fingerprint {
			members[i] = m
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := s.start(ctx, u)
			members[i] = m
			if err != nil {
				errs[i] = fmt.Errorf("upstream %q: %w", u.Name, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, m := range members {
			if m != nil && current[cfg.Upstreams[i].Name] != m {
				m.retire()
			}
		}
		return nil, err
	}
	for i, u := range cfg.Upstreams {
		d.next[u.Name] = members[i]
		if current[u.Name] != members[i] {
			d.started = append(d.started, members[i])
		}
	}
	fail := func(err error) (*Declaration, error) {
		d.Abort()
		return nil, err
	}
	type declared struct {
		ops      []idem.Operation
		doc      []byte
		warnings []string
		err      error
	}
	results := make([]declared, len(members))
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.ops, r.doc, r.warnings, r.err = m.declare(ctx)
		}()
	}
	wg.Wait()
	by := map[string]string{} // served name → upstream
	var mcpOps []idem.Operation
	single := len(cfg.Upstreams) == 1
	var singleDoc []byte
	for i, u := range cfg.Upstreams {
		ops, doc, warnings, err := results[i].ops, results[i].doc, results[i].warnings, results[i].err
		if err != nil {
			return fail(fmt.Errorf("upstream %q: %w", u.Name, err))
		}
		for _, w := range warnings {
			if !single {
				w = fmt.Sprintf("upstream %q: %s", u.Name, w)
			}
			d.Warnings = append(d.Warnings, w)
		}
		for _, op := range ops {
			name := op.Metadata().Name
			if other, taken := by[name]; taken {
				return fail(fmt.Errorf("the upstreams %q and %q both serve %q: give one of them prefix: true (the default, %q then serves it as %q) or leave the tool out with exclude",
					other, u.Name, name, unprefixedOf(cfg, other, u.Name), prefixedFor(cfg, other, u.Name, name)))
			}
			by[name] = u.Name
		}
		if u.Kind == gatewayconfig.KindMCP {
			mcpOps = append(mcpOps, ops...)
		}
		if single {
			singleDoc = doc
		}
		d.Operations = append(d.Operations, ops...)
	}
	slices.SortFunc(d.Operations, func(a, b idem.Operation) int { return strings.Compare(a.Metadata().Name, b.Metadata().Name) })
	d.Upstreams = by
	doc, err := s.document(d.Operations, mcpOps, singleDoc)
	if err != nil {
		return fail(err)
	}
	d.OpenAPI = doc
	return d, nil
}

// unprefixedOf names, of two upstreams, one that serves names unprefixed.
func unprefixedOf(cfg *gatewayconfig.Config, a, b string) string {
	for _, u := range cfg.Upstreams {
		if (u.Name == a || u.Name == b) && !u.Prefix {
			return u.Name
		}
	}
	return a
}

func prefixedFor(cfg *gatewayconfig.Config, a, b, name string) string {
	return unprefixedOf(cfg, a, b) + "." + name
}

// document is the OpenAPI document of ops: the one an upstream's build
// made when it is the only one (idem proxy's, the gateway's), else the one
// built from all the operations, with each MCP tool's answers said as
// Document says them.
func (s *Set) document(ops, mcpOps []idem.Operation, single []byte) ([]byte, error) {
	if single != nil {
		return single, nil
	}
	info := httpapi.OpenAPIInfo{Title: "idem gateway", Version: s.opts.Version}
	if len(mcpOps) == len(ops) {
		return Document(ops, info)
	}
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		return nil, err
	}
	var all, tools map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI(reg.Descriptors(), info), &all); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	if len(mcpOps) > 0 {
		raw, err := Document(mcpOps, info)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, fmt.Errorf("openapi document: %w", err)
		}
		paths, _ := all["paths"].(map[string]any)
		toolPaths, _ := tools["paths"].(map[string]any)
		for _, op := range mcpOps {
			p := op.Metadata().Path
			paths[p] = toolPaths[p]
		}
	}
	return json.Marshal(all)
}

// Close stops every upstream.
func (s *Set) Close() {
	s.mu.Lock()
	members := s.members
	s.members = map[string]*member{}
	s.mu.Unlock()
	for _, m := range members {
		m.retire()
	}
}

// UpstreamState is an upstream's state, as /readyz says it.
type UpstreamState struct {
	Name string `json:"name"`
	// State is "up" or "down".
	State string `json:"state"`
	// Since is when it entered the state.
	Since time.Time `json:"since"`
	// Error says why it is down.
	Error string `json:"error,omitempty"`
	// Operations is how many operations it serves.
	Operations int `json:"operations"`
}

// States are the upstreams' states, by name.
func (s *Set) States() []UpstreamState {
	s.mu.Lock()
	members := slices.Collect(maps.Values(s.members))
	s.mu.Unlock()
	out := make([]UpstreamState, 0, len(members))
	for _, m := range members {
		out = append(out, m.state())
	}
	slices.SortFunc(out, func(a, b UpstreamState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Upstreams are the MCP sessions of the set's MCP upstreams that are
// connected, by upstream name: for what is forwarded besides tools
// (resources, prompts), which must reach the upstream a name came from.
func (s *Set) Upstreams() map[string]*Upstream {
	s.mu.Lock()
	members := maps.Clone(s.members)
	s.mu.Unlock()
	out := map[string]*Upstream{}
	for name, m := range members {
		m.mu.Lock()
		if m.up != nil && !m.retired {
			out[name] = m.up
		}
		m.mu.Unlock()
	}
	return out
}

// member is one upstream of the set.
type member struct {
	set *Set
	cfg gatewayconfig.Upstream
	log *slog.Logger
	// stop ends the reconnection loop.
	stop context.CancelFunc
	ctx  context.Context

	mu     sync.Mutex
	up     *Upstream // MCP: nil while down
	tools  []*mcp.Tool
	listed bool // tools were listed at least once
	// toolsFresh: tools were just listed (connect), and the upstream has
	// not said since that they changed (toolsChanged counts its
	// tools/list_changed): the next declaration need not list them again.
	toolsFresh   bool
	toolsChanged int
	fwd          *proxy.Forwarder
	doc          *proxy.Document // OpenAPI: nil until read
	docFresh     bool            // doc was just read: the next declaration need not read it again
	pending      *proxy.Document // read for a declaration not yet served
	down         error           // why it is down; nil when up
	since        time.Time
	served       int
	probing      bool // a reconnection loop runs
	inflight     int
	retired      bool
	idle         chan struct{} // closed when retired and no call is in flight
}

// start makes the member of u and tries once to reach it.
func (s *Set) start(ctx context.Context, u gatewayconfig.Upstream) (*member, error) {
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m := &member{set: s, cfg: u, log: s.log.With("upstreamName", u.Name), ctx: mctx, stop: stop, since: time.Now(), idle: make(chan struct{})}
	if u.Kind == gatewayconfig.KindOpenAPI {
		base, _ := url.Parse(strings.TrimRight(u.BaseURL, "/"))
		client := proxy.NewClient()
		if len(u.Headers) > 0 {
			client.Transport = &tracked{header: headerOf(u.Headers), next: client.Transport}
		}
		m.fwd = &proxy.Forwarder{Upstream: base, Client: client, MaxResponse: u.MaxStoredResponse}
	}
	if err := m.connect(ctx); err != nil {
		if u.Kind == gatewayconfig.KindOpenAPI && localDocument(u.OpenAPI) {
			// A file of the gateway's own that does not load is a mistake
			// of the config, not an upstream that is down.
			m.retire()
			return nil, err
		}
		m.setDown(err)
		m.log.Warn("the upstream cannot be reached at start: the gateway serves the others and tries again in the background; its tools are served once it answers",
			"error", err.Error())
		m.probe()
	} else {
		m.setUp()
	}
	return m, nil
}

// localDocument says whether an OpenAPI document is read from a file
// (proxy.Load's rule), not from the network.
func localDocument(source string) bool {
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		return false
	}
	if strings.HasPrefix(source, "/") {
		_, err := os.Stat(source)
		return err == nil
	}
	return true
}

func headerOf(h map[string]string) http.Header {
	out := http.Header{}
	for k, v := range h {
		out.Set(k, v)
	}
	return out
}

// configName is the upstream's name in its config, empty for the
// one-upstream flags' (whose contracts come from --contracts).
func (m *member) configName() string {
	if m.cfg.Anonymous {
		return ""
	}
	return m.cfg.Name
}

// upstreamConfig is how an MCP member reaches its upstream.
func (m *member) upstreamConfig() UpstreamConfig {
	cfg := UpstreamConfig{ConnectTimeout: m.connectTimeout(), Logger: m.log, Version: m.set.opts.Version,
		OnToolsChanged: m.toolsChangedUpstream, OnListChanged: m.set.listChanged, MaxResultBytes: m.set.opts.MaxResultBytes}
	if !m.cfg.Anonymous {
		cfg.Name = m.cfg.Name // its records are its own (SPEC §6.2)
	}
	if m.cfg.URL != "" {
		cfg.URL, cfg.Header = m.cfg.URL, headerOf(m.cfg.Headers)
	} else {
		cfg.Command, cfg.Env = m.cfg.Command, m.cfg.Environ(m.set.opts.Environ)
	}
	return cfg
}

// toolsChangedUpstream is the upstream's tools/list_changed: the tools
// last listed are not fresh, and the set declares again.
func (m *member) toolsChangedUpstream() {
	m.mu.Lock()
	m.toolsChanged++
	m.toolsFresh = false
	m.mu.Unlock()
	m.set.signal()
}

// connectTimeout bounds reaching the upstream.
func (m *member) connectTimeout() time.Duration {
	if m.cfg.Timeouts.Connect > 0 {
		return m.cfg.Timeouts.Connect
	}
	return DefaultConnectTimeout
}

// connect reaches the upstream: an MCP session made and its tools listed,
// or an OpenAPI document read.
func (m *member) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.connectTimeout())
	defer cancel()
	if m.cfg.Kind == gatewayconfig.KindOpenAPI {
		doc, err := proxy.Load(ctx, m.cfg.OpenAPI, m.fwd.Upstream, m.fwd.Client)
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.doc, m.docFresh = doc, true
		m.mu.Unlock()
		return nil
	}
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if up == nil {
		var err error
		if up, err = Dial(ctx, m.upstreamConfig()); err != nil {
			return startupCause(err)
		}
		m.mu.Lock()
		if m.retired {
			m.mu.Unlock()
			up.Close()
			return errors.New("the upstream was removed from the config")
		}
		m.up = up
		m.mu.Unlock()
		if m.set.serves(m) {
			// Down until now (at start, or since a reload): its resources
			// and prompts join those served, as when a reload adds it.
			m.set.listChanged("notifications/resources/list_changed")
			m.set.listChanged("notifications/prompts/list_changed")
		}
	}
	m.mu.Lock()
	changed := m.toolsChanged
	m.mu.Unlock()
	tools, err := up.Tools(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	// Fresh unless a list_changed came while it was read: the list may
	// be older than the change.
	m.tools, m.listed, m.toolsFresh = tools, true, m.toolsChanged == changed
	m.mu.Unlock()
	return nil
}

// startupCause is the cause of a failed connection without the words of a
// call ("the call was not sent… the key is free"): no call was made.
func startupCause(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "connect to the upstream"); i >= 0 {
		if j := strings.LastIndex(msg, "); nothing ran"); j > i {
			return errors.New(msg[i:j])
		}
	}
	return err
}

func (m *member) setUp() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down != nil {
		m.since = time.Now()
	}
	m.down = nil
}

func (m *member) setDown(err error) {
	err = startupCause(err)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down == nil {
		m.since = time.Now()
	}
	m.down = err
}

func (m *member) state() UpstreamState {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := UpstreamState{Name: m.cfg.Name, State: "up", Since: m.since, Operations: m.served}
	if m.down != nil {
		st.State, st.Error = "down", m.down.Error()
	}
	return st
}

// probe starts the reconnection loop unless one runs: it tries to reach
// the upstream again after 1 s, then twice as long each time up to the
// cap, and asks the set to declare again once it answers.
func (m *member) probe() {
	m.mu.Lock()
	if m.probing || m.retired {
		m.mu.Unlock()
		return
	}
	m.probing = true
	m.mu.Unlock()
	go func() {
		defer func() {
			m.mu.Lock()
			m.probing = false
			m.mu.Unlock()
		}()
		wait := min(time.Second, m.set.opts.Backoff)
		for {
			t := time.NewTimer(wait)
			select {
			case <-m.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			err := m.connect(m.ctx)
			if err == nil {
				m.setUp()
				m.log.Info("the upstream answers again: its tools are served")
				m.set.signal()
				return
			}
			m.setDown(err)
			m.log.Debug("the upstream is still down", "error", err.Error(), "retryIn", (2 * wait).String())
			wait = max(min(2*wait, m.set.opts.Backoff), time.Second)
		}
	}()
}

// declare builds the member's operations from what it last listed (MCP)
// or read (OpenAPI), reading its overlay again; an MCP upstream that is
// up is listed again first, unless it was just listed on connecting.
func (m *member) declare(ctx context.Context) ([]idem.Operation, []byte, []string, error) {
	overlay, err := proxy.LoadOverlay(m.cfg.Contracts)
	if err != nil {
		return nil, nil, nil, err
	}
	var ops []idem.Operation
	var doc []byte
	var warnings []string
	if m.cfg.Kind == gatewayconfig.KindOpenAPI {
		ops, doc, warnings, err = m.declareOpenAPI(ctx, overlay)
	} else {
		ops, doc, warnings, err = m.declareMCP(ctx, overlay)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	m.mu.Lock()
	m.served = len(ops)
	m.mu.Unlock()
	return ops, doc, warnings, nil
}

func (m *member) declareMCP(ctx context.Context, overlay proxy.Overlay) ([]idem.Operation, []byte, []string, error) {
	m.mu.Lock()
	up, down, fresh := m.up, m.down, m.toolsFresh
	m.toolsFresh = false
	m.mu.Unlock()
	if up != nil && down == nil && !fresh {
		lctx, cancel := context.WithTimeout(ctx, m.connectTimeout())
		tools, err := up.Tools(lctx)
		cancel()
		if err != nil {
			// Served as last listed; its calls answer 503 while it is down.
			m.setDown(err)
			m.log.Warn("the upstream's tools cannot be listed: the tools listed last are served, and the gateway tries again in the background", "error", err.Error())
			m.probe()
		} else {
			m.mu.Lock()
			m.tools, m.listed = tools, true
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	tools := m.tools
	m.mu.Unlock()
	// Served names: the upstream's, prefixed; the overlay and the
	// reconcile names it gives follow.
	upstreamName := map[string]string{}
	var served []*mcp.Tool
	for _, t := range tools {
		if t == nil || !m.cfg.Serves(t.Name) {
			continue
		}
		c := *t
		c.Name = m.cfg.ServedName(t.Name)
		upstreamName[c.Name] = t.Name
		served = append(served, &c)
	}
	renamed := proxy.Overlay{}
	for name, e := range overlay {
		if e.Reconcile != "" {
			e.Reconcile = m.cfg.ServedName(e.Reconcile)
		}
		renamed[m.cfg.ServedName(name)] = e
	}
	built, err := Build(served, renamed, &memberCaller{m: m, names: upstreamName, target: m.upstreamConfig().target()}, Options{Timeout: m.cfg.Timeouts.Call, ConfigUpstream: m.configName()})
	if err != nil {
		return nil, nil, nil, err
	}
	doc, err := Document(built.Operations, httpapi.OpenAPIInfo{Title: "idem gateway", Version: m.set.opts.Version})
	if err != nil {
		return nil, nil, nil, err
	}
	return built.Operations, doc, built.Warnings, nil
}

func (m *member) declareOpenAPI(ctx context.Context, overlay proxy.Overlay) ([]idem.Operation, []byte, []string, error) {
	var warnings []string
	m.mu.Lock()
	doc, fresh := m.doc, m.docFresh
	m.docFresh = false
	m.mu.Unlock()
	if doc == nil {
		return nil, nil, nil, nil // down since start: nothing to serve yet (the reconnection loop reads it)
	}
	if !fresh {
		// The document is read again on every declaration, as idem proxy
		// does on SIGHUP; one that cannot be read keeps the last one
		// served.
		lctx, cancel := context.WithTimeout(ctx, m.connectTimeout())
		again, err := proxy.Load(lctx, m.cfg.OpenAPI, m.fwd.Upstream, m.fwd.Client)
		cancel()
		switch {
		case err != nil && localDocument(m.cfg.OpenAPI):
			return nil, nil, nil, err // the gateway's own file: a mistake to fix
		case err != nil:
			warnings = append(warnings, fmt.Sprintf("the OpenAPI document could not be read again, so the one served is kept: %v", err))
		default:
			doc = again
			m.mu.Lock()
			m.pending = again // m.doc once the declaration is served
			m.mu.Unlock()
		}
	}
	opts := proxy.Options{Forward: m.forward, Unvalidated: !m.cfg.Validate, Upstream: m.fwd.Upstream,
		Timeout: m.cfg.Timeouts.Call, ConfigUpstream: m.configName()}
	if m.cfg.Prefix {
		opts.Prefix = m.cfg.Name
	}
	built, err := proxy.Build(doc, overlay, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return built.Operations, built.Document, append(warnings, built.Warnings...), nil
}

// forward is the handler of an OpenAPI upstream's operation: the
// Forwarder's, refused while the upstream is retired. The upstream's
// timeouts.call bounds it as its operations' timeout (declareOpenAPI).
func (m *member) forward(op proxy.Operation) idem.RawHandler {
	next := m.fwd.Handler(op)
	return func(ctx context.Context, call *idem.Call, req idem.RawRequest) (idem.RawResponse, error) {
		if !m.acquire() {
			return idem.RawResponse{}, removed()
		}
		defer m.release()
		res, err := next(ctx, call, req)
		if idem.IsNotDispatched(err) && idem.ErrorCode(err) == idem.CodeUpstreamUnavailable {
			m.setDown(err)
		} else if err == nil {
			m.setUp()
		}
		return res, err
	}
}

// memberCaller sends an MCP member's calls under the upstream's own tool
// names.
type memberCaller struct {
	m      *member
	names  map[string]string // served → upstream's
	target string            // Target, made once
}

// Target names the member's upstream in its tools' fingerprints, as
// Upstream.Target does (SPEC §6.2): "mcp:<name>", or the URL or command
// line of the one-upstream flags' upstream. Without it a key used on one
// upstream replayed on another of the same tool name on the same store.
func (c *memberCaller) Target() string { return c.target }

func (c *memberCaller) Call(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	m := c.m
	if !m.acquire() {
		return nil, removed()
	}
	defer m.release()
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if up == nil {
		m.probe()
		return nil, unavailable(fmt.Errorf("the upstream %q is down", m.cfg.Name))
	}
	p := *params
	if name, ok := c.names[p.Name]; ok {
		p.Name = name
	}
	res, err := up.Call(ctx, &p)
	switch {
	case err == nil:
		m.setUp()
	case idem.IsNotDispatched(err):
		m.setDown(err)
		m.probe()
	}
	return res, err
}

// watchProgress relays a call's progress from the member's upstream
// (progressWatcher), as the one upstream of idem gateway --upstream does;
// no token while the upstream is down (the call then fails unsent).
func (c *memberCaller) watchProgress(p mcpserver.Progress) (string, func()) {
	c.m.mu.Lock()
	up := c.m.up
	c.m.mu.Unlock()
	if up == nil {
		return "", func() {}
	}
	return up.watchProgress(p)
}

// acquire counts a call in flight; false once the member is retired.
func (m *member) acquire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return false
	}
	m.inflight++
	return true
}

func (m *member) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight--
	if m.retired && m.inflight == 0 {
		m.closeLocked()
	}
}

// retire takes the member out: no new call starts, the reconnection loop
// stops, and the upstream is closed once the calls in flight finish.
func (m *member) retire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return
	}
	m.retired = true
	m.stop()
	if m.inflight == 0 {
		m.closeLocked()
	}
}

func (m *member) closeLocked() {
	select {
	case <-m.idle:
		return
	default:
	}
	close(m.idle)
	if up := m.up; up != nil {
		m.up = nil
		go up.Close()
	}
}

// removed is the error of a call that reached an upstream the config no
// longer has (a reload removed it between the call's routing and its
// send): nothing was sent.
func removed() error {
	return idem.NotDispatched(idem.Errorf(idem.CodeUpstreamUnavailable,
		"the upstream of this tool was removed from the gateway's config, so the call was not sent; nothing ran and the key is free: list the tools again"))
}

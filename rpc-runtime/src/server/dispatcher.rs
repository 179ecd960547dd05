//! The [`Dispatcher`]: the routing table from opcodes to services' methods,
//! the error log, and serving one opened port (the frame itself is decoded
//! in `serve_call.rs`).

use super::lane_pool::LanePool;
use super::serve_call::Scratch;
use super::*;

/// Routes calls to services and keeps the error log. Shared by all server
/// threads (it is `Sync`).
pub struct Dispatcher {
    pub(super) services: Vec<Arc<dyn Service>>,
    /// Every served opcode (the runtime's no-op included): one lookup per
    /// call finds the method and its metrics.
    pub(super) table: Routes,
    pub(super) config: ServerConfig,
    pub(super) errors: Mutex<VecDeque<ServerError>>,
    pub(super) error_count: AtomicU64,
    pub(super) calls: AtomicU64,
    /// Metrics of calls to opcodes nobody serves.
    pub(super) unknown: Counters,
    /// The helpers of `#[gpu_rpc(parallel)]` calls, started at the first
    /// call that runs on several threads.
    pub(super) lane_pool: LanePool,
}

/// Where the calls of one opcode go, and what they have cost so far.
pub(super) struct Route {
    /// The service and method index (`None` for the runtime's no-op).
    pub(super) method: Option<(usize, usize)>,
    /// `Service::method`, as errors, metrics and spans name it.
    pub(super) path: &'static str,
    pub(super) counters: Counters,
}

/// The routing table: routes sorted by opcode, found by binary search. A
/// server looks one up per call: a few comparisons, where hashing the
/// opcode with the standard map's SipHash cost about a hundred instructions.
pub(super) struct Routes(Vec<(u32, Route)>);

impl Routes {
    /// The route of `opcode`, if it is served.
    fn get(&self, opcode: u32) -> Option<&Route> {
        let i = self.0.binary_search_by_key(&opcode, |(op, _)| *op).ok()?;
        Some(&self.0[i].1)
    }

    /// Route `opcode` (the caller checked it is not routed yet).
    fn insert(&mut self, opcode: u32, route: Route) {
        match self.0.binary_search_by_key(&opcode, |(op, _)| *op) {
            Ok(i) => self.0[i].1 = route,
            Err(i) => self.0.insert(i, (opcode, route)),
        }
    }
}

impl Route {
    fn new(method: Option<(usize, usize)>, path: &'static str) -> Route {
        Route {
            method,
            path,
            counters: Counters::default(),
        }
    }
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("services", &self.services.iter().map(|s| s.name()).collect::<Vec<_>>())
            .field("config", &self.config)
            .finish()
    }
}

impl Dispatcher {
    /// An empty dispatcher (it still answers the runtime's no-op call).
    pub fn new(config: ServerConfig) -> Self {
        let lane_pool = LanePool::new(config.lane_threads.saturating_sub(1), config.idle.spin);
        Dispatcher {
            services: Vec::new(),
            table: Routes(vec![(opcodes::NOOP, Route::new(None, "gpu_rpc::noop"))]),
            config,
            errors: Mutex::new(VecDeque::new()),
            error_count: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            unknown: Counters::default(),
            lane_pool,
        }
    }

    /// Per-method metrics so far: the runtime's no-op first, then every
    /// method of every service in the order added, then calls to unknown
    /// opcodes (if any). See [`MethodMetrics`]. A server thread adds the
    /// calls it serves in small batches (at the end of each pass over its
    /// ports, before a call of another method, at least every 64 calls), so
    /// while a kernel runs the numbers may lack a few calls per server
    /// thread; once the servers are done, they are whole.
    pub fn metrics(&self) -> Vec<MethodMetrics> {
        let mut out = Vec::new();
        let noop = self.table.get(opcodes::NOOP).expect("the no-op is always routed");
        out.push(noop.counters.snapshot(noop.path, opcodes::NOOP));
        for service in &self.services {
            for info in service.methods() {
                if let Some(r) = self.table.get(info.desc.opcode) {
                    out.push(r.counters.snapshot(r.path, info.desc.opcode));
                }
            }
        }
        let unknown = self.unknown.snapshot("(unknown)", 0);
        if unknown.calls > 0 {
            out.push(unknown);
        }
        out
    }

    /// Add a service; fails if one of its opcodes is already served or one
    /// of its method descriptions is invalid (nothing is added then).
    pub fn add(&mut self, service: impl Service + 'static) -> Result<&mut Self, AddError> {
        self.add_arc(Arc::new(service))
    }

    /// Add a shared service.
    pub fn add_arc(&mut self, service: Arc<dyn Service>) -> Result<&mut Self, AddError> {
        let idx = self.services.len();
        let mut added: HashMap<u32, usize> = HashMap::new();
        for (m, info) in service.methods().iter().enumerate() {
            let opcode = info.desc.opcode;
            if let Some(problem) = info.desc.problem() {
                return Err(AddError::InvalidMethod {
                    path: info.path,
                    problem,
                });
            }
            let first = match (self.table.get(opcode), added.get(&opcode)) {
                (Some(r), _) => Some(match r.method {
                    Some((s, m)) => self.services[s].methods()[m].qualified(),
                    None => r.path.to_string(),
                }),
                (None, Some(&mm)) => Some(service.methods()[mm].qualified()),
                (None, None) => None,
            };
            if let Some(first) = first {
                return Err(OpcodeCollision {
                    opcode,
                    first,
                    second: info.qualified(),
                }
                .into());
            }
            added.insert(opcode, m);
        }
        for (op, m) in added {
            self.table
                .insert(op, Route::new(Some((idx, m)), service.methods()[m].path));
        }
        self.services.push(service);
        Ok(self)
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Calls served so far (each warp-call counts once). A server thread
    /// adds its calls at the end of each pass over its ports, so while a
    /// kernel runs the count may lack the calls of the passes in progress;
    /// once the servers are done, it is whole.
    pub fn calls(&self) -> u64 {
        // Relaxed: a statistic.
        self.calls.load(Ordering::Relaxed)
    }

    /// The most recent errors (up to `keep_errors`), oldest first.
    pub fn errors(&self) -> Vec<ServerError> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Errors recorded since the start, including those no longer kept.
    pub fn error_count(&self) -> u64 {
        // Relaxed: a statistic.
        self.error_count.load(Ordering::Relaxed)
    }

    pub(super) fn record(&self, e: ServerError) {
        if self.config.log_errors {
            // Not `eprintln!`, which panics when stderr is closed (e.g.
            // `gpu-run ... 2>&1 | head`): a lost log line must not take the
            // server thread, and the call it serves, down with it.
            let _ = writeln!(std::io::stderr(), "{e}");
        }
        #[cfg(feature = "tracing")]
        tracing::warn!(opcode = e.opcode, port = e.port, status = ?e.status, "{e}");
        // Relaxed: a statistic.
        self.error_count.fetch_add(1, Ordering::Relaxed);
        if self.config.keep_errors == 0 {
            return;
        }
        let mut errs = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        while errs.len() >= self.config.keep_errors {
            errs.pop_front();
        }
        errs.push_back(e);
    }

    /// Serve every pending port in `range` once. Returns how many calls were
    /// served, or the abandoned call if the server's abort flag ended a wait.
    pub fn poll(&self, server: &Server<'_>, range: core::ops::Range<u32>) -> Result<usize, Abandoned> {
        self.poll_ranges(server, core::iter::once(range))
    }

    /// [`poll`](Self::poll) over several ranges, in order, as one pass (one
    /// metrics tally, one update of the call count).
    pub(super) fn poll_ranges(
        &self,
        server: &Server<'_>,
        ranges: impl Iterator<Item = core::ops::Range<u32>>,
    ) -> Result<usize, Abandoned> {
        let mut served = 0;
        // The pass's metrics, added to the shared counters when the method
        // changes and when the pass ends (the tally's drop, on every return).
        let mut tally = Tally::default();
        let mut outcome = Ok(());
        'ranges: for range in ranges {
            let mut start = range.start;
            while let Some(port) = server.try_open(start..range.end) {
                start = port.index() + 1;
                let r = self.serve_port_tallied(port, server.memory(), &mut tally);
                if r.is_err() {
                    outcome = r;
                    break 'ranges;
                }
                served += 1;
            }
        }
        // Relaxed: a statistic. Added once per pass, not per call: every
        // server thread adding to this one word per call passed its cache
        // line from core to core.
        self.calls.fetch_add(served as u64, Ordering::Relaxed);
        outcome.map(|()| served)
    }

    /// The loop of one server thread of a backend: serve ports, its own share
    /// (`thread` of `threads` equal shares, dealt in chunks of consecutive
    /// ports), and the others' when its own is idle or every few passes ([`serve_pool`]), until
    /// `done` is set (the kernel is over) and a last pass finds nothing to
    /// do. When a pass finds nothing, the thread waits as the configuration's
    /// [`IdlePolicy`] says (spin, then sleep; each call of this has its own
    /// [`Idle`], so threads started this way do not ring each other awake).
    /// Returns the warp-calls this thread served. [`serve_pool`] is the same
    /// loop over several regions.
    pub fn serve_until(
        &self,
        server: &Server<'_>,
        thread: u32,
        threads: u32,
        done: &AtomicBool,
    ) -> Result<u64, Abandoned> {
        let region = Served {
            server,
            dispatcher: self,
            done,
        };
        let idle = Idle::new(self.config.idle);
        serve_pool(std::slice::from_ref(&region), thread, threads, &idle)
            .pop()
            .expect("one region")
    }

    /// Serve one opened port: decode the frame, run the call, reply, close.
    ///
    /// Whatever the shared memory holds, this neither panics nor allocates
    /// more than [`ServerConfig::max_stream_bytes`] per streamed argument or
    /// out-buffer and lane (plus a fixed amount per call), and it leaves the
    /// port idle (handed back to the client, unlocked) — unless the abort flag
    /// ends a wait for the client, in which case the abandoned call is
    /// recorded as an error and returned. `memory` copies the slices that
    /// go direct (the port's [`Server::memory`]); without it their lanes are
    /// refused.
    pub fn serve_port(
        &self,
        port: Port<'_, '_, ServerSide, Fresh>,
        memory: Option<&dyn DeviceMemory>,
    ) -> Result<(), Abandoned> {
        let r = self.serve_port_tallied(port, memory, &mut Tally::default());
        if r.is_ok() {
            // Relaxed: a statistic.
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// [`serve_port`](Self::serve_port) whose metrics count the call in
    /// `tally` (and time it, if it is one of the sample:
    /// [`LATENCY_SAMPLE`](crate::metrics::LATENCY_SAMPLE)).
    fn serve_port_tallied<'d>(
        &'d self,
        port: Port<'_, '_, ServerSide, Fresh>,
        memory: Option<&dyn DeviceMemory>,
        tally: &mut Tally<'d>,
    ) -> Result<(), Abandoned> {
        let index = port.index();
        let opcode = port.opcode();
        let lanes = port.lanes();
        let route = self.table.get(opcode);
        let method = route
            .and_then(|r| r.method)
            .map(|(s, m)| (s, m, &self.services[s].methods()[m]));
        let metrics = self.config.metrics;
        let started = (metrics && time_next_call()).then(Instant::now);
        let counters = route.map_or(&self.unknown, |r| &r.counters);
        if metrics {
            tally.start(counters);
        }
        #[cfg(feature = "tracing")]
        let _span = tracing::debug_span!(
            "gpu_rpc_call",
            method = route.map_or("(unknown)", |r| r.path),
            opcode,
            port = index,
            lanes
        )
        .entered();
        let mut record = CallRecord::default();
        let r = Scratch::with(|scratch| {
            let r = self.serve_decoded(port, memory, method, &mut record, scratch);
            scratch.trim(self.config.keep_bytes);
            r
        });
        if r.is_ok() && metrics {
            tally.add(counters, &record, started.map(|s| s.elapsed()));
        }
        if let Err(a) = r {
            self.record(ServerError {
                opcode,
                method: method.map(|(_, _, info)| info.path),
                port: index,
                lane: None,
                status: Status::Unknown,
                message: format!("{a}; the server stopped waiting for lanes {lanes:#x} when the kernel ended"),
            });
        }
        r
    }

    pub(super) fn whole_call_error(
        &self,
        opcode: u32,
        method: Option<&'static str>,
        port: u32,
        status: Status,
        message: String,
    ) {
        self.record(ServerError {
            opcode,
            method,
            port,
            lane: None,
            status,
            message,
        });
    }
}

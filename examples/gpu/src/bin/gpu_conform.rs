//! The randomized GPU conformance suite of issue 12 (run by
//! `scripts/gpu-check.sh`): every thread of `conform_kernel` runs a program
//! drawn from `(seed, gid)` — calls of every kind of argument from divergent
//! control flow, loops with per-lane trip counts, both sides of if/else,
//! early returns, `-> !` from part of a warp — and the host checks every
//! lane's calls (in order), its published results and the server log exactly
//! against a model of the same programs (see `gpu_example_services::conform`
//! and `gpu_examples::conform`).
//!
//! For each seed (default 1..=20) it launches the block sizes 1, 31, 32, 33,
//! 96, 256 and 1024 on grids of 1, 2, half the SMs and every SM (which one
//! depends on the seed), with port counts and server threads that also vary
//! with the seed. Each seed runs in a child process of its own (a trap makes a
//! CUDA context unusable, and a hung kernel cannot be stopped), with a
//! watchdog per launch: a hang is a failure with its seed and shape printed,
//! and the next seed still runs.
//!
//! ```text
//! gpu_conform                                  # the full suite
//! gpu_conform --seed 7 --block 33 --grid 66    # reproduce one launch
//! gpu_conform --seeds 3 --block 96             # shrink a run
//! ```
//!
//! Options: `--seed S` (one seed), `--seeds N` (seeds 1..=N), `--block B`,
//! `--grid G`, `--steps K` (top-level ops per lane; default by lane count),
//! `--servers N` (server threads; default by seed),
//! `--timeout SECS` (watchdog: a launch that serves no call for SECS, or runs
//! 10 × SECS in all, is a hang; default 30), `--device N`,
//! `--in-process` (run in this process, no child; what each child runs).
//!
//! Prints one line per launch (`PASS`/`FAIL`, with the command that
//! reproduces a failure) and a summary; exits with 0 when everything passed,
//! 1 otherwise (2 for bad usage).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_example_services::conform::RESULT_WORDS;
use gpu_example_services::ConformServer;
use gpu_examples::{kernels_ptx, ConformHost};
use gpu_rpc::cuda::{
    launch_with_region, CudaDevice, CudaError, CudaRegion, Kernel, KernelArg, Launch, MappedBuffer, Module,
    PinnedBuffer,
};
use gpu_rpc::server::{Dispatcher, ServerConfig};

/// Exit code of `--in-process` when nothing could run (no driver, no kernel):
/// the parent then does not try the other seeds.
const SETUP_FAILED: u8 = 4;

/// A launch is a hang when no call is served for `--timeout`, or when it
/// is still running after this many timeouts although calls are served.
const SLOW_FACTOR: u32 = 10;

/// Block sizes every seed runs.
const BLOCKS: [u32; 7] = [1, 31, 32, 33, 96, 256, 1024];

/// Command-line options.
#[derive(Clone, Debug)]
struct Opts {
    seed: Option<u64>,
    seeds: u64,
    block: Option<u32>,
    grid: Option<u32>,
    steps: Option<u32>,
    servers: Option<u32>,
    timeout: Duration,
    device: usize,
    in_process: bool,
}

fn usage() -> &'static str {
    "usage: gpu_conform [--seed S | --seeds N] [--block B] [--grid G] [--steps K] [--servers N] [--timeout SECS] [--device N] [--in-process]"
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        seed: None,
        seeds: 20,
        block: None,
        grid: None,
        steps: None,
        servers: None,
        timeout: Duration::from_secs(30),
        device: 0,
        in_process: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--in-process" {
            o.in_process = true;
            continue;
        }
        const VALUED: [&str; 8] = [
            "--seed",
            "--servers",
            "--seeds",
            "--block",
            "--grid",
            "--steps",
            "--timeout",
            "--device",
        ];
        if !VALUED.contains(&a.as_str()) {
            return Err(format!("unknown option {a}"));
        }
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let num = |v: &str| -> Result<u64, String> { v.parse::<u64>().map_err(|e| format!("{a} {v}: {e}")) };
        let positive = |v: &str| -> Result<u32, String> {
            match num(v)? {
                0 => Err(format!("{a} must be at least 1")),
                n => u32::try_from(n).map_err(|e| format!("{a} {v}: {e}")),
            }
        };
        match a.as_str() {
            "--seed" => o.seed = Some(num(v)?),
            "--seeds" => o.seeds = positive(v)? as u64,
            "--block" => o.block = Some(positive(v)?),
            "--grid" => o.grid = Some(positive(v)?),
            "--steps" => o.steps = Some(positive(v)?),
            "--timeout" => o.timeout = Duration::from_secs(positive(v)? as u64),
            "--servers" => o.servers = Some(positive(v)?),
            _ => o.device = num(v)? as usize,
        }
    }
    Ok(o)
}

impl Opts {
    fn seed_list(&self) -> Vec<u64> {
        match self.seed {
            Some(s) => vec![s],
            None => (1..=self.seeds).collect(),
        }
    }

    /// The options a child (or a reproduction) passes on besides the seed.
    fn passed_on(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(b) = self.block {
            v.extend(["--block".to_string(), b.to_string()]);
        }
        if let Some(g) = self.grid {
            v.extend(["--grid".to_string(), g.to_string()]);
        }
        if let Some(n) = self.servers {
            v.extend(["--servers".to_string(), n.to_string()]);
        }
        if let Some(k) = self.steps {
            v.extend(["--steps".to_string(), k.to_string()]);
        }
        v.extend(["--timeout".to_string(), self.timeout.as_secs().to_string()]);
        v.extend(["--device".to_string(), self.device.to_string()]);
        v
    }
}

/// One launch: everything is derived from the seed, the block size and the
/// grid (and `--steps` if given), so `--seed --block --grid` reproduces it.
#[derive(Clone, Debug)]
struct Shape {
    seed: u64,
    block: u32,
    grid: u32,
    steps: u32,
    ports: u32,
    servers: usize,
    steps_given: bool,
    servers_given: bool,
}

impl Shape {
    fn new(seed: u64, block_index: usize, block: u32, o: &Opts, sms: u32) -> Shape {
        let grids = [1, 2, sms.div_ceil(2), sms];
        let grid = o.grid.unwrap_or(grids[(seed as usize + block_index) % grids.len()]);
        let lanes = grid as u64 * block as u64;
        // Fewer top-level ops for the largest launches keeps a full run near a
        // minute; every lane still makes several calls.
        let steps = o.steps.unwrap_or(match lanes {
            0..=8192 => 24,
            8193..=40_000 => 10,
            _ => 3,
        });
        let warps = grid as u64 * block.div_ceil(32) as u64;
        let ports = match seed % 3 {
            0 => warps.min(4096) as u32,
            1 => 64,
            _ => 7,
        };
        Shape {
            seed,
            block,
            grid,
            steps,
            ports,
            servers: o.servers.map_or([1, 2, 4, 8][(seed % 4) as usize], |n| n as usize),
            steps_given: o.steps.is_some(),
            servers_given: o.servers.is_some(),
        }
    }

    fn lanes(&self) -> usize {
        self.grid as usize * self.block as usize
    }

    fn label(&self) -> String {
        format!(
            "seed {} block {} grid {} ({} lanes, {} steps, {} ports, {} server threads)",
            self.seed,
            self.block,
            self.grid,
            self.lanes(),
            self.steps,
            self.ports,
            self.servers
        )
    }

    fn repro(&self) -> String {
        let steps = if self.steps_given {
            format!(" --steps {}", self.steps)
        } else {
            String::new()
        };
        let servers = if self.servers_given {
            format!(" --servers {}", self.servers)
        } else {
            String::new()
        };
        format!(
            "reproduce: gpu_conform --seed {} --block {} --grid {}{steps}{servers}",
            self.seed, self.block, self.grid
        )
    }
}

/// Totals of a run, passed from a child to the parent as one `#stats` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stats {
    launches: u64,
    not_run: u64,
    lane_calls: u64,
    failed: u64,
    errors: u64,
    traps: u64,
    hangs: u64,
    launch_failures: u64,
}

impl Stats {
    const FIELDS: [&'static str; 8] = [
        "launches",
        "not_run",
        "lane_calls",
        "failed",
        "errors",
        "traps",
        "hangs",
        "launch_failures",
    ];

    fn values(&self) -> [u64; 8] {
        [
            self.launches,
            self.not_run,
            self.lane_calls,
            self.failed,
            self.errors,
            self.traps,
            self.hangs,
            self.launch_failures,
        ]
    }

    fn to_line(self) -> String {
        let parts: Vec<String> = Self::FIELDS
            .iter()
            .zip(self.values())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("#stats {}", parts.join(" "))
    }

    fn parse(line: &str) -> Option<Stats> {
        let mut v = [0u64; 8];
        for part in line.strip_prefix("#stats ")?.split_whitespace() {
            let (k, n) = part.split_once('=')?;
            let i = Self::FIELDS.iter().position(|f| *f == k)?;
            v[i] = n.parse().ok()?;
        }
        Some(Stats {
            launches: v[0],
            not_run: v[1],
            lane_calls: v[2],
            failed: v[3],
            errors: v[4],
            traps: v[5],
            hangs: v[6],
            launch_failures: v[7],
        })
    }

    fn add(&mut self, o: &Stats) {
        self.launches += o.launches;
        self.not_run += o.not_run;
        self.lane_calls += o.lane_calls;
        self.failed += o.failed;
        self.errors += o.errors;
        self.traps += o.traps;
        self.hangs += o.hangs;
        self.launch_failures += o.launch_failures;
    }
}

/// How a launch failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Wrong calls, values or results, or server errors.
    Error,
    /// The kernel faulted (trap, illegal address, ...).
    Trap,
    /// The launch was refused (e.g. too many resources for the block).
    Launch,
}

/// The result of one launch.
struct Outcome {
    line: String,
    failed: Option<Class>,
    lane_calls: u64,
    context_lost: bool,
}

/// Messages from the worker thread that runs the launches to the thread that
/// watches it.
enum Msg {
    Device(String),
    Plan(u64),
    Start(
        Shape,
        Arc<ConformHost>,
        Arc<Dispatcher>,
        Arc<PinnedBuffer>,
        Arc<CudaRegion>,
    ),
    Done(Outcome),
    NotRun(u64, String),
    Fatal(String),
}

fn run_shape(
    region: &CudaRegion,
    kernel: &Kernel<'_>,
    shape: &Shape,
    host: &Arc<ConformHost>,
    d: &Dispatcher,
    results: &PinnedBuffer,
) -> Result<Outcome, String> {
    let cfg = Launch {
        grid: (shape.grid, 1, 1),
        block: (shape.block, 1, 1),
        server_threads: shape.servers,
        ..Launch::default()
    };
    let args = [
        KernelArg::U64(shape.seed),
        KernelArg::U32(shape.steps),
        KernelArg::Ptr(results.device_ptr()),
    ];
    let t0 = Instant::now();
    let r = launch_with_region(region, kernel, &cfg, d, &args);
    let secs = t0.elapsed().as_secs_f64();
    let label = shape.label();
    let repro = shape.repro();
    let report = match r {
        Ok(report) => report,
        Err(err) => {
            let (class, what) = match &err {
                CudaError::KernelFault { .. } => (Class::Trap, "trap"),
                CudaError::LaunchFailed { name, .. } if name.contains("OUT_OF_RESOURCES") => (
                    Class::Launch,
                    "cannot launch (too many registers or too much local memory per thread for this block size: \
                     the register-footprint issue)",
                ),
                CudaError::BlockTooLarge { .. } => {
                    (Class::Launch, "cannot launch (block larger than the kernel allows)")
                }
                CudaError::LaunchFailed { .. } => (Class::Launch, "cannot launch"),
                _ => (Class::Error, "launch error"),
            };
            let seen = seen(host, d);
            return Ok(Outcome {
                line: format!(
                    "FAIL {label}: {what}: {err} (server errors {}{seen}) | {repro}",
                    d.error_count()
                ),
                failed: Some(class),
                lane_calls: 0,
                context_lost: err.is_context_lost(),
            });
        }
    };
    // SAFETY: the kernel has finished (launch returned); nothing writes the
    // buffer any more.
    let bytes = unsafe { results.as_slice() };
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let verdict = host.verify(&words, d);
    let quiet = region.is_quiescent().map_err(|e| e.to_string())?;
    let stats = format!(
        "{} lane-calls, {} warp-calls, {:.2} s",
        verdict.lane_calls, report.calls, secs
    );
    let (line, failed) = if let Some(p) = verdict.problem() {
        (format!("FAIL {label}: {p}; {stats} | {repro}"), Some(Class::Error))
    } else if report.errors != 0 {
        (
            format!(
                "FAIL {label}: the launch reported {} server errors; {stats} | {repro}",
                report.errors
            ),
            Some(Class::Error),
        )
    } else if !quiet {
        (
            format!("FAIL {label}: a port was left locked or pending; {stats} | {repro}"),
            Some(Class::Error),
        )
    } else {
        (format!("PASS {label}: {stats}"), None)
    };
    Ok(Outcome {
        line,
        failed,
        lane_calls: verdict.lane_calls,
        context_lost: false,
    })
}

/// What the host saw before a launch failed: its first problem and the
/// server log's first error, for the `FAIL` line.
fn seen(host: &ConformHost, d: &Dispatcher) -> String {
    let mut s = String::new();
    if let Some(m) = host.problems().into_iter().next() {
        s += &format!("; host saw first: {m}");
    }
    if let Some(e) = d.errors().into_iter().next() {
        s += &format!("; server log first: {e}");
    }
    s
}

/// The worker: load the kernel, run every shape of the options' seeds, report
/// each step to the watcher. Stops after a fault that loses the context.
fn worker(o: &Opts, tx: &std::sync::mpsc::Sender<Msg>) -> Result<(), String> {
    let e = |e: CudaError| e.to_string();
    let dev = CudaDevice::new(o.device).map_err(e)?;
    let sms = dev.sm_count().map_err(e)?;
    let _ = tx.send(Msg::Device(format!(
        "{} ({} SMs, cc {:?})",
        dev.name().unwrap_or_default(),
        sms,
        dev.compute_capability().ok()
    )));
    let ptx = kernels_ptx()?;
    if !ptx.contains(".entry conform_kernel") {
        return Err("the embedded PTX has no conform_kernel (rebuild gpu-examples)".into());
    }
    let module = Module::from_ptx(&dev, ptx).map_err(e)?;
    let kernel = module.kernel("conform_kernel").map_err(e)?;
    let mut shapes = Vec::new();
    for seed in o.seed_list() {
        for (i, &b) in BLOCKS.iter().enumerate() {
            if o.block.is_none_or(|want| want == b) {
                shapes.push(Shape::new(seed, i, b, o, sms));
            }
        }
        if let Some(b) = o.block.filter(|b| !BLOCKS.contains(b)) {
            shapes.push(Shape::new(seed, 0, b, o, sms));
        }
    }
    let _ = tx.send(Msg::Plan(shapes.len() as u64));
    for (i, shape) in shapes.iter().enumerate() {
        let host = Arc::new(ConformHost::new(shape.seed, shape.steps, shape.lanes()));
        let mut d = Dispatcher::new(ServerConfig {
            log_errors: false,
            ..ServerConfig::default()
        });
        d.add(ConformServer(Arc::clone(&host))).map_err(|e| e.to_string())?;
        let d = Arc::new(d);
        let mut results = PinnedBuffer::new(&dev, shape.lanes() * RESULT_WORDS * 8).map_err(e)?;
        // SAFETY: no kernel uses the buffer yet.
        unsafe { results.as_mut_slice() }.fill(0xff);
        let results = Arc::new(results);
        let region = Arc::new(CudaRegion::new(&dev, shape.ports).map_err(e)?);
        let _ = tx.send(Msg::Start(
            shape.clone(),
            Arc::clone(&host),
            Arc::clone(&d),
            Arc::clone(&results),
            Arc::clone(&region),
        ));
        let outcome = run_shape(&region, &kernel, shape, &host, &d, &results)?;
        let lost = outcome.context_lost;
        let _ = tx.send(Msg::Done(outcome));
        if lost {
            let left = (shapes.len() - i - 1) as u64;
            if left > 0 {
                let _ = tx.send(Msg::NotRun(
                    left,
                    format!("the CUDA context is lost: {left} more launches of this run were not run"),
                ));
            }
            break;
        }
    }
    Ok(())
}

/// Run the launches in this process, watching each one; prints the `PASS` /
/// `FAIL` lines, then the `#stats` line. A hang ends the process (a running
/// kernel cannot be stopped) after printing both.
fn run_in_process(o: Opts) -> ExitCode {
    let (tx, rx) = channel();
    let wo = o.clone();
    std::thread::spawn(move || {
        if let Err(e) = worker(&wo, &tx) {
            let _ = tx.send(Msg::Fatal(e));
        }
    });
    let mut stats = Stats::default();
    // Loading the module JIT-compiles the PTX: allow it more time.
    let mut wait = o.timeout * 10;
    type Current = (
        Shape,
        Arc<ConformHost>,
        Arc<Dispatcher>,
        Arc<PinnedBuffer>,
        Arc<CudaRegion>,
        Instant,
    );
    let mut current: Option<Current> = None;
    let mut fatal = false;
    let mut planned = 0;
    let mut last_calls = 0;
    loop {
        match rx.recv_timeout(wait) {
            Ok(Msg::Device(d)) => println!("#device {d}"),
            Ok(Msg::Plan(n)) => planned = n,
            Ok(Msg::Start(shape, host, d, results, region)) => {
                last_calls = 0;
                current = Some((shape, host, d, results, region, Instant::now()));
                wait = o.timeout;
            }
            Ok(Msg::Done(out)) => {
                println!("{}", out.line);
                stats.launches += 1;
                stats.lane_calls += out.lane_calls;
                match out.failed {
                    None => {}
                    Some(c) => {
                        stats.failed += 1;
                        match c {
                            Class::Error => stats.errors += 1,
                            Class::Trap => stats.traps += 1,
                            Class::Launch => stats.launch_failures += 1,
                        }
                    }
                }
                current = None;
            }
            Ok(Msg::NotRun(n, why)) => {
                println!("SKIP {why}");
                stats.not_run += n;
            }
            Ok(Msg::Fatal(e)) => {
                println!("FAIL setup: {e}");
                stats.failed += 1;
                stats.errors += 1;
                fatal = true;
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                // A launch that still gets calls served is slow, not hung:
                // wait on, up to `SLOW_FACTOR` timeouts in all.
                let mut why = format!("no call served for {} s", o.timeout.as_secs());
                if let Some((.., d, _, _, t0)) = &current {
                    let calls = d.calls();
                    if calls > last_calls {
                        if t0.elapsed() < o.timeout * SLOW_FACTOR {
                            last_calls = calls;
                            continue;
                        }
                        why = format!(
                            "still serving after {} s, the limit",
                            (o.timeout * SLOW_FACTOR).as_secs()
                        );
                    }
                }
                stats.failed += 1;
                stats.hangs += 1;
                match &current {
                    Some((shape, host, d, results, region, t0)) => {
                        // SAFETY: the buffer is alive (this thread holds an
                        // `Arc`); the hung kernel may still write it, so the
                        // words are read one by one, volatile, for a
                        // diagnostic only (a word being written may be stale).
                        let words: Vec<u64> = (0..shape.lanes() * RESULT_WORDS)
                            .map(|i| unsafe { results.host_ptr().cast::<u64>().add(i).read_volatile() })
                            .collect();
                        let (n, which) = host.unfinished(&words, 3);
                        let seen = format!("{}; {n} lanes unfinished, e.g. {which}", seen(host, d));
                        println!(
                            "FAIL {}: hang: {why}, not finished after {:.0} s (watchdog; {} warp-calls served, server errors {}{seen}) | {}",
                            shape.label(),
                            t0.elapsed().as_secs_f64(),
                            d.calls(),
                            d.error_count(),
                            shape.repro()
                        );
                        // Where the calls stopped: every port not at rest.
                        match region.busy_ports() {
                            Ok(busy) if busy.is_empty() => println!("#hang every port is at rest"),
                            Ok(busy) => {
                                for p in busy.iter().take(16) {
                                    println!("#hang {p}");
                                }
                                if busy.len() > 16 {
                                    println!("#hang ... {} more ports not at rest", busy.len() - 16);
                                }
                            }
                            Err(e) => println!("#hang cannot read the ports: {e}"),
                        }
                    }
                    None => println!(
                        "FAIL setup: hang: no progress for {} s (loading the kernel?)",
                        wait.as_secs()
                    ),
                }
                stats.launches += 1;
                stats.not_run += planned.saturating_sub(stats.launches);
                println!("{}", stats.to_line());
                let _ = std::io::stdout().flush();
                // The kernel cannot be stopped: end the process (the driver
                // tears the context down with it).
                std::process::exit(3);
            }
        }
    }
    println!("{}", stats.to_line());
    if fatal {
        ExitCode::from(SETUP_FAILED)
    } else if stats.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Run each seed in a child process (`--in-process --seed S`), relaying its
/// lines; a child that dies or outlives its watchdog is a failure of that
/// seed, and the next seed still runs.
fn run_children(o: &Opts) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            println!("FAIL setup: cannot find this program's path: {e}");
            return ExitCode::from(1);
        }
    };
    let t0 = Instant::now();
    let mut total = Stats::default();
    let mut device_shown = false;
    let per_seed_launches = if o.block.is_some() { 1 } else { BLOCKS.len() as u32 };
    // The child's own watchdog ends it; this one only catches a child that
    // cannot end (e.g. stuck in the driver while exiting).
    let backstop = o.timeout * (10 + SLOW_FACTOR * per_seed_launches + 2) + Duration::from_secs(30);
    for seed in o.seed_list() {
        let mut cmd = Command::new(&exe);
        cmd.arg("--in-process")
            .args(["--seed", &seed.to_string()])
            .args(o.passed_on())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                println!("FAIL seed {seed}: cannot start a child process: {e}");
                total.failed += 1;
                total.errors += 1;
                continue;
            }
        };
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + backstop;
        let mut stats = None;
        let mut killed = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(d) = line.strip_prefix("#device ") {
                        if !device_shown {
                            println!("device: {d}");
                            device_shown = true;
                        }
                    } else if line.starts_with("#stats ") {
                        stats = Stats::parse(&line);
                    } else {
                        println!("{line}");
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    killed = true;
                    break;
                }
            }
        }
        let status = child.wait();
        let _ = reader.join();
        let setup_failed = matches!(&status, Ok(st) if st.code() == Some(SETUP_FAILED as i32));
        match stats {
            Some(s) if !killed => total.add(&s),
            _ => {
                let why = if killed {
                    format!("killed after {} s without finishing", backstop.as_secs())
                } else {
                    format!("ended without a summary ({status:?})")
                };
                println!(
                    "FAIL seed {seed}: the child process {why} | reproduce: gpu_conform --seed {seed} {}",
                    o.passed_on().join(" ")
                );
                total.failed += 1;
                if killed {
                    total.hangs += 1;
                } else {
                    total.traps += 1;
                }
                if let Some(s) = stats {
                    total.add(&Stats { failed: 0, ..s });
                }
            }
        }
        if setup_failed {
            println!("SKIP the other seeds: the setup failed");
            break;
        }
    }
    println!(
        "gpu_conform: {} launches ({} not run), {} lane-calls in {:.1} s: {} failed (errors {}, traps {}, hangs {}, launch failures {})",
        total.launches,
        total.not_run,
        total.lane_calls,
        t0.elapsed().as_secs_f64(),
        total.failed,
        total.errors,
        total.traps,
        total.hangs,
        total.launch_failures
    );
    if total.failed == 0 && total.not_run == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gpu_conform: {e}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    if o.in_process {
        run_in_process(o)
    } else {
        run_children(&o)
    }
}

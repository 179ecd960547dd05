//! Stress on the CPU backend: many client threads making many calls over
//! 1, 7, 64 and 4096 ports with 1 to 4 server threads. Every count is exact,
//! no error is recorded and no port is left locked or pending afterwards.
//! Iteration counts are small in debug builds (the whole file runs in a few
//! seconds on two cores) and larger in release builds.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use gpu_rpc::cpu::{self, CpuRegion, Launch};
use gpu_rpc::gpu_rpc;
use gpu_rpc::protocol::Layout;
use gpu_rpc::server::{Dispatcher, ServerConfig};

#[gpu_rpc]
pub trait Stress {
    fn add(&self, a: u64, b: u64) -> u64;
    /// A print-like call: the text's byte length.
    fn print(&self, s: &str) -> u64;
    /// Fills `out[i] = seed + i`; returns the length.
    fn fill(&self, seed: u32, out: &mut [u32]) -> u32;
    #[gpu_rpc(async)]
    fn note(&self, thread: u32, x: u64);
    /// Ends the calling lane.
    fn exit(&self, code: u32) -> !;
}

#[derive(Default)]
struct Host {
    adds: AtomicU64,
    prints: AtomicU64,
    printed_bytes: AtomicU64,
    fills: AtomicU64,
    notes: AtomicU64,
    note_sum: AtomicU64,
    exits: Mutex<Vec<u32>>,
}

// Relaxed everywhere: counters read after `cpu::launch_with_region` joined every thread.
impl Stress for Arc<Host> {
    fn add(&self, a: u64, b: u64) -> u64 {
        self.adds.fetch_add(1, Ordering::Relaxed);
        a.wrapping_add(b)
    }
    fn print(&self, s: &str) -> u64 {
        self.prints.fetch_add(1, Ordering::Relaxed);
        self.printed_bytes.fetch_add(s.len() as u64, Ordering::Relaxed);
        s.len() as u64
    }
    fn fill(&self, seed: u32, out: &mut [u32]) -> u32 {
        self.fills.fetch_add(1, Ordering::Relaxed);
        for (i, o) in out.iter_mut().enumerate() {
            *o = seed.wrapping_add(i as u32);
        }
        out.len() as u32
    }
    fn note(&self, thread: u32, x: u64) {
        // Relaxed: a tally; it is read after the threads that add to it are joined.
        self.notes.fetch_add(1, Ordering::Relaxed);
        self.note_sum
            .fetch_add(thread as u64 * 1_000_000 + x, Ordering::Relaxed);
    }
    fn exit(&self, code: u32) -> ! {
        self.exits.lock().unwrap().push(code);
        gpu_rpc::lanes::halt()
    }
}

const PORT_COUNTS: [u32; 4] = [1, 7, 64, 4096];

fn iters(debug: u64, release: u64) -> u64 {
    if cfg!(debug_assertions) {
        debug
    } else {
        release
    }
}

fn setup() -> (Dispatcher, Arc<Host>) {
    let host = Arc::new(Host::default());
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: true,
        ..ServerConfig::default()
    });
    d.add(StressServer(host.clone())).unwrap();
    (d, host)
}

/// Run `f` on its own thread; fail instead of hanging.
fn watchdog<T: Send + 'static>(what: String, secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: still running after {secs} s (hung)"),
    }
}

/// Chains of round trips: each answer feeds the next call, so one lost or
/// duplicated call shows in the thread's final value.
#[test]
fn round_trips_are_exact_across_port_and_server_counts() {
    let threads = 6usize;
    let n = iters(150, 2000);
    for ports in PORT_COUNTS {
        for servers in 1..=4usize {
            let what = format!("{ports} ports, {servers} server threads");
            watchdog(what.clone(), 120, move || {
                let (d, host) = setup();
                let region = CpuRegion::new(Layout::new(ports, 1).unwrap());
                let launch = Launch {
                    threads,
                    server_threads: servers,
                    port_count: ports,
                    lane_size: 1,
                };
                let finals = AtomicU64::new(0);
                let report = cpu::launch_with_region(&region, &launch, &d, |client, t| {
                    let s = StressClient::new(client);
                    let mut x = t.id as u64 * 1_000_000;
                    for _ in 0..n {
                        let y = s.add(x, 1);
                        assert_eq!(y, x + 1);
                        x = y;
                    }
                    // Relaxed: read after the run joined every thread.
                    finals.fetch_add(x, Ordering::Relaxed);
                })
                .unwrap();
                let t = threads as u64;
                let want = (0..t).map(|i| i * 1_000_000 + n).sum::<u64>();
                assert_eq!(finals.load(Ordering::Relaxed), want, "{what}");
                assert_eq!(host.adds.load(Ordering::Relaxed), t * n, "{what}");
                assert_eq!(report.calls, t * n, "{what}");
                assert_eq!(report.errors, 0, "{what}: {:?}", d.errors());
                assert!(region.is_quiescent(), "{what}: a port was left locked or pending");
            });
        }
    }
}

/// A long mixed run: print-like calls with `&str`, round trips, out-buffers,
/// fire-and-forget calls, and one lane that ends through a `-> !` method.
/// Every kind is counted exactly.
#[test]
fn long_mixed_run_counts_every_kind() {
    let threads = 5usize;
    let n = iters(100, 1000);
    for ports in PORT_COUNTS {
        let what = format!("mixed run on {ports} ports");
        watchdog(what.clone(), 120, move || {
            let (d, host) = setup();
            let region = CpuRegion::new(Layout::new(ports, 1).unwrap());
            let launch = Launch {
                threads,
                server_threads: 2,
                port_count: ports,
                lane_size: 1,
            };
            let after_exit = AtomicUsize::new(0);
            let bytes = AtomicU64::new(0);
            let report = cpu::launch_with_region(&region, &launch, &d, |client, t| {
                let s = StressClient::new(client);
                let id = t.id as u32;
                for i in 0..n {
                    let text = format!("thread {id} line {i}: {}", "é".repeat(i as usize % 40));
                    assert_eq!(s.print(&text), text.len() as u64);
                    // Relaxed: read after the run joined every thread.
                    bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
                    assert_eq!(s.add(i, id as u64), i + id as u64);
                    let mut out = vec![0u32; (i as usize * 7 + t.id) % 90];
                    assert_eq!(s.fill(id * 1000 + i as u32, &mut out), out.len() as u32);
                    assert!(out
                        .iter()
                        .enumerate()
                        .all(|(k, &v)| v == id * 1000 + i as u32 + k as u32));
                    s.note(id, i);
                }
                if t.id == 0 {
                    s.exit(7);
                }
                // Relaxed: read after the run joined every thread.
                after_exit.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            let t = threads as u64;
            assert_eq!(report.halted, 1, "{what}");
            assert_eq!(after_exit.load(Ordering::Relaxed), threads - 1, "{what}");
            assert_eq!(*host.exits.lock().unwrap(), [7], "{what}");
            assert_eq!(host.prints.load(Ordering::Relaxed), t * n, "{what}");
            assert_eq!(
                host.printed_bytes.load(Ordering::Relaxed),
                bytes.load(Ordering::Relaxed),
                "{what}"
            );
            assert_eq!(host.adds.load(Ordering::Relaxed), t * n, "{what}");
            assert_eq!(host.fills.load(Ordering::Relaxed), t * n, "{what}");
            assert_eq!(host.notes.load(Ordering::Relaxed), t * n, "{what}");
            let note_sum: u64 = (0..t).map(|id| n * id * 1_000_000 + n * (n - 1) / 2).sum();
            assert_eq!(host.note_sum.load(Ordering::Relaxed), note_sum, "{what}");
            assert_eq!(report.calls, 4 * t * n + 1, "{what}");
            assert_eq!(report.errors, 0, "{what}: {:?}", d.errors());
            assert!(region.is_quiescent(), "{what}: a port was left locked or pending");
        });
    }
}

/// `VmRSS` and `VmHWM` of this process, in bytes (Linux).
fn rss() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((kib("VmRSS:")?, kib("VmHWM:")?))
}

const MIB: u64 = 1 << 20;
/// The stream limit of the memory test: the largest call it makes.
const BIG: u64 = 4 * MIB;

/// What the memory test does in its own process (a clean peak): the
/// largest calls the limits allow — a `BIG` string in and a `BIG`
/// out-buffer back, from two client threads at once, twice — then prints
/// the resident set before, at its peak and after.
fn largest_calls_in_this_process() {
    let host = Arc::new(Host::default());
    let mut d = Dispatcher::new(ServerConfig {
        max_stream_bytes: BIG,
        max_call_bytes: BIG,
        ..ServerConfig::default()
    });
    d.add(StressServer(host.clone())).unwrap();
    let region = CpuRegion::new(Layout::new(4, 1).unwrap());
    let launch = Launch {
        threads: 2,
        server_threads: 2,
        port_count: 4,
        lane_size: 1,
    };
    // Warm up threads and the allocator, then reset the peak.
    cpu::launch_with_region(&region, &launch, &d, |c, _| {
        StressClient::new(c).add(1, 2);
    })
    .unwrap();
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
    let (before, _) = rss().unwrap();
    cpu::launch_with_region(&region, &launch, &d, |c, _| {
        let s = StressClient::new(c);
        for round in 0..2u32 {
            let text = "x".repeat(BIG as usize);
            assert_eq!(s.print(&text), BIG);
            drop(text);
            let mut out = vec![0u32; (BIG / 4) as usize];
            assert_eq!(s.fill(round, &mut out), (BIG / 4) as u32);
            assert_eq!(out[12345], round + 12345);
        }
    })
    .unwrap();
    let (after, peak) = rss().unwrap();
    println!("RSS before {before} peak {peak} after {after}");
}

/// Host memory under the largest calls stays within what the limits allow.
/// Measured in a child process (this test binary, run again on this test
/// alone) so other tests' memory does not count: two client threads each
/// hold their own `BIG` buffer while the server holds at most, per call, the
/// stream or the out-buffer and its packed copy (`2 × BIG`). What stays
/// resident afterwards is printed, not checked: the allocator keeps freed
/// memory (the server's own keep is capped by `KEEP_TOTAL_BYTES`, checked by
/// a unit test in `server.rs`).
#[test]
fn host_memory_is_bounded_under_the_largest_calls() {
    if std::env::var_os("GPU_RPC_MEMORY_CHILD").is_some() {
        return largest_calls_in_this_process();
    }
    if rss().is_none() || std::fs::metadata("/proc/self/clear_refs").is_err() {
        eprintln!("skipped: host_memory_is_bounded_under_the_largest_calls needs Linux /proc");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "host_memory_is_bounded_under_the_largest_calls",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GPU_RPC_MEMORY_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find_map(|l| l.split_once("RSS before").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no RSS line from the child:\n{text}"));
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let (before, peak, after) = (n[0], n[1], n[2]);
    eprintln!(
        "host memory under the largest calls: peak +{} MiB, after +{} MiB",
        peak.saturating_sub(before) / MIB,
        after.saturating_sub(before) / MIB
    );
    // Clients: 2 × BIG; server: 2 calls at once × 2 × BIG; slack for the
    // allocator and thread stacks.
    let allowed = 2 * BIG + 2 * 2 * BIG + 16 * MIB;
    assert!(
        peak.saturating_sub(before) <= allowed,
        "peak grew by {} MiB, allowed {} MiB",
        (peak - before) / MIB,
        allowed / MIB
    );
}

//! Per-method metrics of a [`Dispatcher`](crate::server::Dispatcher): calls,
//! lanes, lanes by status, bytes in and out, and a histogram of the host's
//! time per call, from a sample of the calls ([`LATENCY_SAMPLE`]). Kept with
//! relaxed atomic counters (a server thread adds the calls it served in one
//! pass over the ports in one go; no lock, no allocation), so they stay on;
//! read them with [`Dispatcher::metrics`](crate::server::Dispatcher::metrics).

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::call::Status;

/// Statuses counted per method, in this order (`Status::Unknown` last).
const STATUSES: [Status; 9] = [
    Status::Ok,
    Status::UnknownOpcode,
    Status::SignatureMismatch,
    Status::HandlerPanicked,
    Status::InvalidArgument,
    Status::TooLarge,
    Status::BadFrame,
    Status::InvalidLaneMask,
    Status::Unknown,
];

/// Buckets of the latency histogram: bucket `k` counts calls that took less
/// than `2^k` µs (the first, under 1 µs; the last, everything longer).
pub const LATENCY_BUCKETS: usize = 24;

/// A server thread times its first call, then about one call in this many,
/// at random gaps: the latency histogram is a sample of the calls (every
/// other counter counts them all; a method with few calls may have none
/// timed, and in a short run the threads' first calls, often the slowest,
/// weigh more than their share). A clock read costs 20 to 200 ns,
/// depending on the host's clock source (BENCHMARKS.md, workload 7), a
/// large part of a warp-call's few hundred; a timed call reads it twice.
pub const LATENCY_SAMPLE: u32 = 8;

/// Whether the calling server thread times the call it is about to serve
/// ([`LATENCY_SAMPLE`]).
pub(crate) fn time_next_call() -> bool {
    thread_local! {
        /// Calls to serve untimed before the next timed one, and the
        /// xorshift state that draws the gaps (0: not seeded yet).
        static SAMPLER: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    }
    SAMPLER.with(|s| {
        let (left, mut x) = s.get();
        if left > 0 {
            s.set((left - 1, x));
            return false;
        }
        if x == 0 {
            // A seed that differs between threads: this thread's copy's
            // address (the bits an allocator's alignment leaves zero are
            // shifted out).
            x = ((s as *const Cell<(u32, u32)> as usize >> 4) as u32) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // Gaps uniform in 0..=2(N-1), of mean N-1: one timed call in N.
        s.set((x % (2 * LATENCY_SAMPLE - 1), x));
        true
    })
}

fn status_slot(s: Status) -> usize {
    STATUSES.iter().position(|&x| x == s).unwrap_or(STATUSES.len() - 1)
}

/// The live counters of one method.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    lanes: AtomicU64,
    by_status: [AtomicU64; STATUSES.len()],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS],
}

/// What one served warp-call adds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CallRecord {
    /// Lanes answered, by status slot.
    pub by_status: [u32; STATUSES.len()],
    /// Bytes the device sent (argument blocks and streams).
    pub bytes_in: u64,
    /// Bytes the host answered with (return values and out-buffers).
    pub bytes_out: u64,
}

impl CallRecord {
    pub(crate) fn lane(&mut self, status: Status) {
        self.lanes(status, 1);
    }

    /// `n` lanes answered `status`.
    pub(crate) fn lanes(&mut self, status: Status, n: u32) {
        self.by_status[status_slot(status)] += n;
    }
}

/// One server thread's metrics not yet added to the shared [`Counters`]:
/// the calls it served one after another for one method, gathered in plain
/// integers and added in one go: before it serves a call of another method
/// (so a handler that reads the metrics, or ends the process, finds this
/// thread's earlier calls counted), after [`TALLY_CALLS`] calls, when the
/// pass over the ports ends and when the tally is dropped. Several server
/// threads adding every call to the same counters would pass their cache
/// lines back and forth a few times per call.
#[derive(Debug, Default)]
pub(crate) struct Tally<'c> {
    into: Option<&'c Counters>,
    calls: u64,
    lanes: u64,
    by_status: [u64; STATUSES.len()],
    bytes_in: u64,
    bytes_out: u64,
    latency: [u64; LATENCY_BUCKETS],
}

/// The most calls a [`Tally`] gathers before it adds them to the counters.
const TALLY_CALLS: u64 = 64;

impl<'c> Tally<'c> {
    /// About to serve a call of the method whose counters are `into`: the
    /// calls of another method gathered so far are added first.
    pub(crate) fn start(&mut self, into: &'c Counters) {
        if !self.into.is_some_and(|c| core::ptr::eq(c, into)) {
            self.flush();
            self.into = Some(into);
        }
    }

    /// Counts one warp-call of the method whose counters are `into`, which
    /// took the host `took` if it was timed.
    pub(crate) fn add(&mut self, into: &'c Counters, r: &CallRecord, took: Option<Duration>) {
        self.start(into);
        self.calls += 1;
        for (c, &n) in self.by_status.iter_mut().zip(&r.by_status) {
            *c += n as u64;
            self.lanes += n as u64;
        }
        self.bytes_in += r.bytes_in;
        self.bytes_out += r.bytes_out;
        if let Some(took) = took {
            let micros = took.as_micros();
            let bucket = if micros == 0 {
                0
            } else {
                ((u128::BITS - micros.leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
            };
            self.latency[bucket] += 1;
        }
        if self.calls >= TALLY_CALLS {
            self.flush();
        }
    }

    /// Adds what was gathered to the counters, and starts again from zero.
    pub(crate) fn flush(&mut self) {
        if let Some(c) = self.into.take() {
            c.add(self);
            // Field by field: assigning a whole new tally would drop this one.
            self.calls = 0;
            self.lanes = 0;
            self.by_status = [0; STATUSES.len()];
            self.bytes_in = 0;
            self.bytes_out = 0;
            self.latency = [0; LATENCY_BUCKETS];
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Counters {
    /// Adds what `t` gathered (Relaxed throughout: statistics, read as a
    /// snapshot whose counters need not agree with one another at any
    /// instant). Zero counters are skipped: every add is a read-modify-write
    /// of a cache line the server threads share.
    fn add(&self, t: &Tally<'_>) {
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.calls, t.calls);
        add(&self.lanes, t.lanes);
        for (c, &n) in self.by_status.iter().zip(&t.by_status) {
            add(c, n);
        }
        add(&self.bytes_in, t.bytes_in);
        add(&self.bytes_out, t.bytes_out);
        for (c, &n) in self.latency.iter().zip(&t.latency) {
            add(c, n);
        }
    }

    pub(crate) fn snapshot(&self, path: &'static str, opcode: u32) -> MethodMetrics {
        // Relaxed: a statistic.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MethodMetrics {
            path,
            opcode,
            calls: get(&self.calls),
            lanes: get(&self.lanes),
            by_status: STATUSES
                .iter()
                .zip(&self.by_status)
                .map(|(&s, c)| (s, get(c)))
                .filter(|&(_, n)| n > 0)
                .collect(),
            bytes_in: get(&self.bytes_in),
            bytes_out: get(&self.bytes_out),
            latency: core::array::from_fn(|k| get(&self.latency[k])),
        }
    }
}

/// A snapshot of one method's metrics.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// let d = Dispatcher::new(ServerConfig::default());
/// cpu::launch(&Launch { threads: 2, ..Launch::default() }, &d, |client, _| {
///     for i in 0..5 {
///         client.noop(i).unwrap();
///     }
/// })
/// .unwrap();
/// let noop = d.metrics().into_iter().find(|m| m.path == "gpu_rpc::noop").unwrap();
/// assert_eq!((noop.calls, noop.lanes, noop.errors()), (10, 10, 0));
/// assert_eq!(noop.bytes_in, 10 * 16); // per lane: the frame word and the `u64` argument
/// assert!(noop.latency_quantile(0.5).is_some());
/// assert!(noop.to_json().starts_with("{\"method\":\"gpu_rpc::noop\""));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodMetrics {
    /// `Service::method` (`"gpu_rpc::noop"` for the runtime's no-op,
    /// `"(unknown)"` for calls to opcodes nobody serves).
    pub path: &'static str,
    /// Its opcode (0 for the unknown-opcode row).
    pub opcode: u32,
    /// Warp-calls served.
    pub calls: u64,
    /// Lanes answered, over all calls.
    pub lanes: u64,
    /// Lanes by status (only statuses that occurred).
    pub by_status: Vec<(Status, u64)>,
    /// Bytes the device sent: per lane the frame word, the argument block
    /// and streamed arguments.
    pub bytes_in: u64,
    /// Bytes the host answered with: return values and out-buffers.
    pub bytes_out: u64,
    /// Host time per call (from finding the call to handing the port
    /// back), bucket `k` counting the timed calls under `2^k` µs
    /// ([`LATENCY_BUCKETS`]): a sample of about one call in
    /// [`LATENCY_SAMPLE`], so its total is about `calls / LATENCY_SAMPLE`.
    pub latency: [u64; LATENCY_BUCKETS],
}

impl MethodMetrics {
    /// Lanes answered with a status other than `Ok`.
    pub fn errors(&self) -> u64 {
        self.by_status
            .iter()
            .filter(|(s, _)| *s != Status::Ok)
            .map(|(_, n)| n)
            .sum()
    }

    /// An upper bound of the `q` quantile (0..=1) of the host time per call
    /// (a bucket's upper edge), over the timed calls; `None` before any.
    pub fn latency_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        let want = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, &n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(Duration::from_micros(1u64 << k));
            }
        }
        Some(Duration::from_micros(1u64 << (LATENCY_BUCKETS - 1)))
    }

    /// One JSON object on one line (no trailing newline).
    pub fn to_json(&self) -> String {
        let statuses: Vec<String> = self.by_status.iter().map(|(s, n)| format!("\"{s:?}\":{n}")).collect();
        let latency: Vec<String> = self.latency.iter().map(u64::to_string).collect();
        format!(
            "{{\"method\":\"{}\",\"opcode\":{},\"calls\":{},\"lanes\":{},\"lanes_by_status\":{{{}}},\
             \"bytes_in\":{},\"bytes_out\":{},\"latency_us_log2_buckets\":[{}]}}",
            self.path.replace('\\', "\\\\").replace('"', "\\\""),
            self.opcode,
            self.calls,
            self.lanes,
            statuses.join(","),
            self.bytes_in,
            self.bytes_out,
            latency.join(",")
        )
    }
}

impl fmt::Display for MethodMetrics {
    /// One table row: method, calls, lanes, errors, bytes, p50/p99 host time.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |q| self.latency_quantile(q).map_or("-".to_string(), |d| format!("<{d:?}"));
        write!(
            f,
            "{:<32} {:>10} calls {:>10} lanes {:>8} errors {:>12} B in {:>12} B out  p50 {:>9}  p99 {:>9}",
            self.path,
            self.calls,
            self.lanes,
            self.errors(),
            self.bytes_in,
            self.bytes_out,
            q(0.5),
            q(0.99)
        )
    }
}

/// All methods' metrics as one JSON line: `{"methods":[...]}`.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// let d = gpu_rpc::server::Dispatcher::new(Default::default());
/// assert!(gpu_rpc::metrics::to_json_line(&d.metrics()).starts_with("{\"methods\":["));
/// ```
pub fn to_json_line(metrics: &[MethodMetrics]) -> String {
    let rows: Vec<String> = metrics.iter().map(MethodMetrics::to_json).collect();
    format!("{{\"methods\":[{}]}}", rows.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread times its first call, then one in `LATENCY_SAMPLE` on
    /// average, never leaving more than `2 (LATENCY_SAMPLE - 1)` untimed in
    /// a row.
    #[test]
    fn a_thread_times_its_first_call_then_one_in_eight() {
        std::thread::spawn(|| {
            assert!(time_next_call());
            let n = 80_000;
            let (mut timed, mut gap, mut widest) = (0u32, 0u32, 0u32);
            for _ in 0..n {
                if time_next_call() {
                    timed += 1;
                    widest = widest.max(gap);
                    gap = 0;
                } else {
                    gap += 1;
                }
            }
            let expect = n / LATENCY_SAMPLE;
            assert!(timed.abs_diff(expect) < expect / 10, "{timed} of {n} timed");
            // Some 10 000 gaps drawn from 15 values: the widest is all but
            // certain to come up.
            assert_eq!(widest, 2 * (LATENCY_SAMPLE - 1));
        })
        .join()
        .unwrap();
    }

    fn record(ok: u32, bad: u32, bytes: u64) -> CallRecord {
        let mut r = CallRecord::default();
        r.by_status[status_slot(Status::Ok)] = ok;
        r.by_status[status_slot(Status::TooLarge)] = bad;
        r.bytes_in = bytes;
        r.bytes_out = 2 * bytes;
        r
    }

    #[test]
    fn a_tally_adds_when_the_method_changes_and_when_dropped() {
        let (a, b) = (Counters::default(), Counters::default());
        let mut t = Tally::default();
        t.add(&a, &record(32, 0, 8), Some(Duration::from_nanos(500)));
        t.add(&a, &record(30, 2, 8), Some(Duration::from_micros(3)));
        // Nothing reaches the shared counters until the method changes.
        assert_eq!(a.snapshot("a", 1).calls, 0);
        t.add(&b, &record(1, 0, 16), Some(Duration::from_secs(1000)));
        let sa = a.snapshot("a", 1);
        assert_eq!((sa.calls, sa.lanes, sa.bytes_in, sa.bytes_out), (2, 64, 16, 32));
        assert_eq!(sa.by_status, vec![(Status::Ok, 62), (Status::TooLarge, 2)]);
        assert_eq!(sa.latency[0], 1, "500 ns is under 1 µs");
        assert_eq!(sa.latency[2], 1, "3 µs is in [2, 4) µs");
        assert_eq!(b.snapshot("b", 2).calls, 0);
        drop(t);
        let sb = b.snapshot("b", 2);
        assert_eq!((sb.calls, sb.lanes, sb.bytes_in), (1, 1, 16));
        assert_eq!(
            sb.latency[LATENCY_BUCKETS - 1],
            1,
            "the last bucket takes everything longer"
        );
        // Each call was added once.
        assert_eq!(a.snapshot("a", 1).calls, 2);
    }

    #[test]
    fn a_tally_adds_before_another_method_is_served_and_after_a_bounded_number_of_calls() {
        let (a, b) = (Counters::default(), Counters::default());
        let mut t = Tally::default();
        t.add(&a, &record(32, 0, 8), Some(Duration::ZERO));
        t.start(&b);
        assert_eq!(a.snapshot("a", 1).calls, 1, "counted before b's handler runs");
        for _ in 0..TALLY_CALLS {
            t.add(&b, &record(1, 0, 0), Some(Duration::ZERO));
        }
        assert_eq!(
            b.snapshot("b", 2).calls,
            TALLY_CALLS,
            "never more than TALLY_CALLS behind"
        );
        t.add(&b, &record(1, 0, 0), Some(Duration::ZERO));
        assert_eq!(b.snapshot("b", 2).calls, TALLY_CALLS);
        drop(t);
        assert_eq!(b.snapshot("b", 2).calls, TALLY_CALLS + 1);
    }
}

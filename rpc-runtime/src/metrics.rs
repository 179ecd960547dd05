//! Per-method metrics of a [`Dispatcher`](crate::server::Dispatcher): calls,
//! lanes, lanes by status, bytes in and out, and a histogram of the host's
//! time per call. Kept with relaxed atomic counters (a few per call, no
//! lock, no allocation), so they stay on; read them with
//! [`Dispatcher::metrics`](crate::server::Dispatcher::metrics).
//!
//! Each counter set is split in [`SHARDS`] cache-line-aligned shards, and a
//! server thread adds to its own (`shard()`): threads serving the same
//! method then do not pass one cache line around on every call (with one
//! shared set, that traffic bounded how well server threads scaled).
//! Readers sum the shards.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

fn status_slot(s: Status) -> usize {
    STATUSES.iter().position(|&x| x == s).unwrap_or(STATUSES.len() - 1)
}

/// Shards of each counter set (threads beyond this many share them).
const SHARDS: usize = 8;

/// This thread's shard: threads are numbered as they first count, and
/// take the shards in turn.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Relaxed: only distinctness matters, not order.
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// `T` alone on its cache lines (two 64-byte lines: adjacent-line
/// prefetchers pair them).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// A count kept in shards ([`Tally::add`] adds to this thread's shard,
/// [`Tally::get`] sums them).
#[derive(Debug, Default)]
pub(crate) struct Tally([Padded<AtomicU64>; SHARDS]);

impl Tally {
    pub(crate) fn add(&self, n: u64) {
        // Relaxed: a statistic.
        self.0[shard()].0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        // Relaxed: a statistic, read as a snapshot.
        self.0.iter().map(|p| p.0.load(Ordering::Relaxed)).sum()
    }
}

/// The live counters of one method, in shards.
#[derive(Debug, Default)]
pub(crate) struct Counters([Padded<Shard>; SHARDS]);

/// One shard of a method's counters.
#[derive(Debug, Default)]
struct Shard {
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
        self.by_status[status_slot(status)] += 1;
    }
}

impl Counters {
    pub(crate) fn add(&self, r: &CallRecord, took: Duration) {
        let s = &self.0[shard()].0;
        // Relaxed throughout: statistics, read as a snapshot whose counters
        // need not agree with one another at any instant.
        s.calls.fetch_add(1, Ordering::Relaxed);
        let lanes: u32 = r.by_status.iter().sum();
        s.lanes.fetch_add(lanes as u64, Ordering::Relaxed);
        for (c, &n) in s.by_status.iter().zip(&r.by_status) {
            if n > 0 {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        s.bytes_in.fetch_add(r.bytes_in, Ordering::Relaxed);
        s.bytes_out.fetch_add(r.bytes_out, Ordering::Relaxed);
        let micros = took.as_micros();
        let bucket = if micros == 0 {
            0
        } else {
            ((u128::BITS - micros.leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
        };
        s.latency[bucket].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, path: &'static str, opcode: u32) -> MethodMetrics {
        // Relaxed: a statistic, summed over the shards.
        let sum = |f: &dyn Fn(&Shard) -> &AtomicU64| self.0.iter().map(|p| f(&p.0).load(Ordering::Relaxed)).sum();
        MethodMetrics {
            path,
            opcode,
            calls: sum(&|s| &s.calls),
            lanes: sum(&|s| &s.lanes),
            by_status: STATUSES
                .iter()
                .enumerate()
                .map(|(k, &st)| (st, sum(&|s| &s.by_status[k])))
                .filter(|&(_, n)| n > 0)
                .collect(),
            bytes_in: sum(&|s| &s.bytes_in),
            bytes_out: sum(&|s| &s.bytes_out),
            latency: core::array::from_fn(|k| sum(&|s| &s.latency[k])),
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
    /// Host time per call (from finding the call to handing the port back),
    /// bucket `k` counting calls under `2^k` µs ([`LATENCY_BUCKETS`]).
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
    /// (a bucket's upper edge); `None` before any call.
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

    /// Threads count into their own shards; the sums are exact, and more
    /// threads than shards share them without losing a count.
    #[test]
    fn shards_sum_to_every_count() {
        let counters = Counters::default();
        let tally = Tally::default();
        let mut record = CallRecord::default();
        record.lane(Status::Ok);
        record.lane(Status::Ok);
        record.lane(Status::TooLarge);
        record.bytes_in = 5;
        std::thread::scope(|s| {
            for _ in 0..2 * SHARDS + 1 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        counters.add(&record, Duration::from_micros(3));
                        tally.add(2);
                    }
                });
            }
        });
        let calls = (2 * SHARDS as u64 + 1) * 1000;
        let m = counters.snapshot("t::m", 7);
        assert_eq!(
            (m.calls, m.lanes, m.bytes_in, m.bytes_out),
            (calls, 3 * calls, 5 * calls, 0)
        );
        assert_eq!(m.by_status, [(Status::Ok, 2 * calls), (Status::TooLarge, calls)]);
        assert_eq!(m.latency.iter().sum::<u64>(), calls);
        assert_eq!(m.latency[2], calls, "3 µs is under 2^2 µs");
        assert_eq!(tally.get(), 2 * calls);
    }
}

//! Per-method metrics of a [`Dispatcher`](crate::server::Dispatcher): calls,
//! lanes, lanes by status, bytes in and out, and a histogram of the host's
//! time per call. Kept with relaxed atomic counters (a few per call, no
//! lock, no allocation), so they stay on; read them with
//! [`Dispatcher::metrics`](crate::server::Dispatcher::metrics).

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
        self.by_status[status_slot(status)] += 1;
    }
}

impl Counters {
    pub(crate) fn add(&self, r: &CallRecord, took: Duration) {
        // Relaxed throughout: statistics, read as a snapshot whose counters
        // need not agree with one another at any instant.
        self.calls.fetch_add(1, Ordering::Relaxed);
        let lanes: u32 = r.by_status.iter().sum();
        self.lanes.fetch_add(lanes as u64, Ordering::Relaxed);
        for (c, &n) in self.by_status.iter().zip(&r.by_status) {
            if n > 0 {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        self.bytes_in.fetch_add(r.bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(r.bytes_out, Ordering::Relaxed);
        let micros = took.as_micros();
        let bucket = if micros == 0 {
            0
        } else {
            ((u128::BITS - micros.leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
        };
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
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
    /// Host time per call (from finding the call to handing the port back;
    /// a call found right after another, in the same pass over the ports,
    /// from the end of that one: the scan between, well under 1 µs, saves a
    /// clock read), bucket `k` counting calls under `2^k` µs
    /// ([`LATENCY_BUCKETS`]).
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

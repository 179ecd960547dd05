//! Shared pieces of the GPU example programs: the embedded kernels and the
//! host implementations of the example services.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use gpu_example_services::bulk::{self, Bulk};
use gpu_example_services::{Bench, HostServices};

pub mod conform;
pub mod cpp_demo;

pub use conform::{ConformHost, Verdict};

/// The example kernels as PTX for sm_90 (empty when no device toolchain was
/// found at build time).
pub const KERNELS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));

/// The PTX, or a message saying why there is none.
///
/// ```
/// // Either the kernels were built, or the error says why not.
/// match gpu_examples::kernels_ptx() {
///     Ok(ptx) => assert!(ptx.contains(".entry rpc_noop_kernel")),
///     Err(e) => assert!(e.contains("not built")),
/// }
/// ```
pub fn kernels_ptx() -> Result<&'static str, String> {
    if KERNELS_PTX.trim().is_empty() {
        Err("the example kernels were not built (no nvptx64 toolchain at build time; see README)".into())
    } else {
        Ok(KERNELS_PTX)
    }
}

/// Host side of [`HostServices`] for the hello example: prints, adds, serves
/// blocks of a fixed text, and exits the process.
#[derive(Debug, Default)]
pub struct Hello {
    /// Lines printed.
    pub printed: AtomicU64,
}

/// What `read_block` serves.
pub const BLOCK_TEXT: &[u8] = b"gpu_rpc serves typed host calls to GPU kernels. ";

impl HostServices for Hello {
    fn print_stderr(&self, msg: &str) {
        eprintln!("{msg}");
        // Relaxed: a statistic.
        self.printed.fetch_add(1, Ordering::Relaxed);
    }

    fn exit(&self, code: i32) -> ! {
        eprintln!(
            "[host] exit({code}) after {} lines",
            self.printed.load(Ordering::Relaxed)
        );
        std::process::exit(code)
    }

    fn add(&self, a: u64, b: u64) -> u64 {
        a + b
    }

    fn read_block(&self, offset: u64, out: &mut [u8]) -> usize {
        let start = (offset as usize).min(BLOCK_TEXT.len());
        let n = out.len().min(BLOCK_TEXT.len() - start);
        out[..n].copy_from_slice(&BLOCK_TEXT[start..start + n]);
        n
    }
}

/// Host side of [`Bench`] for the checks and benchmarks: counts everything.
#[derive(Debug, Default)]
pub struct Counters {
    /// `incr` calls (lane-calls).
    pub incr: AtomicU64,
    /// Bytes received by `sink`.
    pub sunk: AtomicU64,
    /// Lines received by `log`.
    pub logged: Mutex<Vec<String>>,
}

impl Bench for Counters {
    fn incr(&self, x: u64) -> u64 {
        // Relaxed: a statistic read after the launch.
        self.incr.fetch_add(1, Ordering::Relaxed);
        x + 1
    }

    fn sink(&self, data: &[u8]) -> u64 {
        // Relaxed: a statistic read after the launch.
        self.sunk.fetch_add(data.len() as u64, Ordering::Relaxed);
        data.len() as u64
    }

    fn log(&self, msg: &str) {
        self.logged.lock().unwrap().push(msg.to_string());
    }
}

/// Host side of [`HostServices`] that records printed lines instead of
/// printing them (for the printing checks and benchmarks).
#[derive(Debug, Default)]
pub struct Recorder {
    /// Every printed line.
    pub lines: Mutex<Vec<String>>,
}

impl HostServices for Recorder {
    fn print_stderr(&self, msg: &str) {
        self.lines.lock().unwrap().push(msg.to_string());
    }

    fn exit(&self, code: i32) -> ! {
        std::process::exit(code)
    }

    fn add(&self, a: u64, b: u64) -> u64 {
        a + b
    }

    fn read_block(&self, _offset: u64, _out: &mut [u8]) -> usize {
        0
    }
}

/// Host side of [`Bulk`]: compares and writes the pattern, and counts the
/// bytes that went each way.
#[derive(Debug, Default)]
pub struct BulkHost {
    /// Bytes received (`check_*`).
    pub received: AtomicU64,
    /// Bytes sent (`give_*`, `source`).
    pub sent: AtomicU64,
}

impl Bulk for BulkHost {
    fn check_bytes(&self, seed: u64, data: &[u8]) -> u64 {
        // Relaxed: a statistic read after the launch.
        self.received.fetch_add(data.len() as u64, Ordering::Relaxed);
        data.iter()
            .enumerate()
            .filter(|&(i, &b)| b != bulk::byte(seed, i as u64))
            .count() as u64
    }

    fn check_halves(&self, seed: u64, data: &[u32]) -> u64 {
        // Relaxed: as above.
        self.received.fetch_add(4 * data.len() as u64, Ordering::Relaxed);
        data.iter()
            .enumerate()
            .filter(|&(i, &w)| w != bulk::word(seed, i as u64) as u32)
            .count() as u64
    }

    fn give_bytes(&self, seed: u64, out: &mut [u8]) -> u64 {
        // Relaxed: as above.
        self.sent.fetch_add(out.len() as u64, Ordering::Relaxed);
        for (i, b) in out.iter_mut().enumerate() {
            *b = bulk::byte(seed, i as u64);
        }
        out.len() as u64
    }

    fn give_words(&self, seed: u64, out: &mut [u64]) -> u64 {
        // Relaxed: as above.
        self.sent.fetch_add(8 * out.len() as u64, Ordering::Relaxed);
        for (i, w) in out.iter_mut().enumerate() {
            *w = bulk::word(seed, i as u64);
        }
        out.len() as u64
    }

    fn give_half(&self, seed: u64, out: &mut [u8]) -> u64 {
        let dirty = out.iter().filter(|&&b| b != 0).count() as u64;
        let half = out.len() / 2;
        self.give_bytes(seed, &mut out[..half]);
        dirty
    }

    fn source(&self, out: &mut [u8]) -> u64 {
        // Relaxed: as above.
        self.sent.fetch_add(out.len() as u64, Ordering::Relaxed);
        out.fill(1);
        out.len() as u64
    }
}

//! The host side of `CppDemo` (the service the CUDA C++ kernel
//! `cpp/cpp_demo.cu` calls) and what every thread of that kernel must end
//! with, so a run can check each lane.

use std::sync::atomic::{AtomicU64, Ordering};

use gpu_example_services::cpp_demo::{CppDemo, Sample};

/// Result words per thread in `cpp_demo_kernel`'s output (`SLOTS` there).
pub const SLOTS: usize = 12;

/// Host side of [`CppDemo`]: pure functions of the arguments, plus a count
/// of the fire-and-forget notes.
#[derive(Debug, Default)]
pub struct CppDemoHost {
    /// `note` calls served.
    pub notes: AtomicU64,
    /// Sum of the lanes that sent a note.
    pub note_sum: AtomicU64,
}

impl CppDemo for CppDemoHost {
    fn scale(&self, x: u32, factor: i64) -> i64 {
        x as i64 * factor
    }
    fn record(&self, s: Sample) -> Sample {
        Sample {
            lane: s.lane + 1,
            value: s.value * 2.0,
            flags: [s.flags[2], s.flags[1], s.flags[0]],
            ok: !s.ok,
        }
    }
    fn checksum(&self, data: &[u32]) -> u64 {
        data.iter().enumerate().map(|(i, &x)| (i as u64 + 1) * x as u64).sum()
    }
    fn greet(&self, name: &str) -> u32 {
        name.strip_prefix("lane ")
            .and_then(|n| n.parse().ok())
            .unwrap_or(u32::MAX)
    }
    fn fill(&self, seed: u32, out: &mut [u16]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = (seed as u16).wrapping_add(7 * i as u16);
        }
    }
    fn count_ok(&self, items: &[Sample]) -> Option<u32> {
        (!items.is_empty()).then(|| items.iter().filter(|s| s.ok).count() as u32)
    }
    fn halve(&self, x: u32) -> Result<u32, i32> {
        if x.is_multiple_of(2) {
            Ok(x / 2)
        } else {
            Err(-(x as i32))
        }
    }
    fn note(&self, lane: u32) {
        // Relaxed: counters read after the kernels finished and the servers
        // were joined.
        self.notes.fetch_add(1, Ordering::Relaxed);
        self.note_sum.fetch_add(lane as u64, Ordering::Relaxed);
    }
    fn pair(&self) -> (u32, u32) {
        (1, 2)
    }
}

/// What thread `tid` (thread `tid % block` of its block) of
/// `cpp_demo_kernel` writes, slot by slot (the kernel's comments say why).
///
/// ```
/// let r = gpu_examples::cpp_demo::expected(4, 128);
/// assert_eq!(r[5], 4); // greet("lane 4")
/// assert_eq!(r[8], 2); // halve(4)
/// ```
pub fn expected(tid: u32, block: u32) -> [u64; SLOTS] {
    let t = tid as u64;
    let factor: i64 = if (tid % block).is_multiple_of(3) { 3 } else { -2 };
    let checksum: u64 = (0..t % 50).map(|i| (i + 1) * (t + i)).sum();
    let fill: u64 = (0..(t % 40 + 1))
        .map(|i| ((tid as u16).wrapping_add(7 * i as u16)) as u64 * (i + 1))
        .sum();
    let m = tid % 4;
    let count = if m == 0 {
        0xffff_ffff
    } else {
        (0..m).filter(|i| (i + tid).is_multiple_of(2)).count() as u64
    };
    let half = if tid.is_multiple_of(2) {
        t / 2
    } else {
        -(tid as i64) as u64
    };
    let acc: i64 = (0..tid % 5)
        .map(|i| if i % 2 == 0 { i as i64 } else { i as i64 * 10 })
        .sum();
    let ok = tid % 2 == 1;
    [
        (tid as i64 * factor) as u64,
        t + 1,
        (tid as f64).to_bits(),
        3 | (t & 0xff) << 8 | 1 << 16 | ((!ok) as u64) << 24,
        checksum,
        t,
        fill,
        count,
        half,
        acc as u64,
        1,
        0,
    ]
}

/// How many of `n` threads send a note, and the sum of their ids.
pub fn expected_notes(n: u32) -> (u64, u64) {
    let lanes = (0..n as u64).filter(|t| t % 7 != 0);
    (lanes.clone().count() as u64, lanes.sum())
}

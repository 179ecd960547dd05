//! The pinned memory [`CudaCopies`](super::CudaCopies) lends to calls
//! ([`DeviceMemory::lend`](crate::device_memory::DeviceMemory::lend)): an
//! [`Arena`] is one pinned allocation, lent in pieces ([`Pieces`]), so that
//! the memory made for one large call serves several smaller calls at once
//! afterwards. Arenas are never freed while the region runs (freeing pinned
//! memory may wait for the device, which may be waiting for this server);
//! how many bytes they hold in all is the pool's business (`copy.rs`).
//!
//! An arena also knows which of its free bytes hold zeros (`clean`): the
//! cleaner (`cleaner.rs`) zeroes what host methods wrote after their loans
//! end, so the next call's out-buffers need no zeroing on its way.

use std::ptr::NonNull;

use cudarc::driver::{result, sys};

use super::copy::call;
use crate::device_memory::CopyError;

/// Pieces are lent in multiples of this many bytes (a multiple of every
/// element alignment, and few free ranges to keep).
pub(super) const PIECE_BYTES: usize = 64 << 10;

/// One pinned allocation (`cuMemHostAlloc`), freed on drop, and which of
/// its bytes are lent now.
pub(super) struct Arena {
    pub(super) host: NonNull<u8>,
    /// The bytes neither lent nor being zeroed.
    pub(super) free: Pieces,
    /// The free bytes known to hold zeros (a subset of `free`).
    pub(super) clean: Pieces,
    /// The free bytes host methods wrote, not zeroed yet: the cleaner's
    /// work (a subset of `free` and apart from `clean`).
    pub(super) dirty: Pieces,
    /// Heap memory standing in for the pinned allocation (the cleaner's
    /// unit tests, without a driver).
    #[cfg(test)]
    heap: Option<Vec<u8>>,
}

// SAFETY: an owned pinned allocation; its pieces are handed to one thread
// each (the pool's lock decides which), never the same bytes to two.
unsafe impl Send for Arena {}

impl Arena {
    pub(super) fn new(len: usize) -> Result<Arena, CopyError> {
        // SAFETY: allocates host memory; no pointer is read.
        let host = call("cuMemHostAlloc", || unsafe {
            result::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let host = NonNull::new(host.cast::<u8>()).ok_or(CopyError {
            what: "cuMemHostAlloc returned null",
            code: 0,
        })?;
        Ok(Arena {
            host,
            free: Pieces::new(len),
            // Pinned memory comes with whatever it held: nothing is known
            // to be zero until the cleaner zeroes it.
            clean: Pieces::new(0),
            dirty: Pieces::new(0),
            #[cfg(test)]
            heap: None,
        })
    }

    /// An arena of `len` bytes of heap memory, each `fill` (tests only).
    #[cfg(test)]
    pub(super) fn on_heap(len: usize, fill: u8) -> Arena {
        let mut heap = vec![fill; len];
        Arena {
            host: NonNull::new(heap.as_mut_ptr()).expect("a vector's pointer is not null"),
            free: Pieces::new(len),
            clean: Pieces::new(0),
            dirty: Pieces::new(0),
            heap: Some(heap),
        }
    }

    /// The arena's bytes (tests only; nothing else may be using them).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> &[u8] {
        self.heap.as_deref().expect("a heap arena")
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        #[cfg(test)]
        if self.heap.is_some() {
            return;
        }
        // SAFETY: the arena's own pinned allocation; the pool drops it only
        // with the copies, when no call holds a piece.
        let _ = call("cuMemFreeHost", || unsafe {
            result::free_host(self.host.as_ptr().cast())
        });
    }
}

/// The free byte ranges `[start, end)` of an arena, sorted, never touching
/// (neighbours are merged when a piece comes back).
#[derive(Debug)]
pub(super) struct Pieces {
    free: Vec<(usize, usize)>,
}

impl Pieces {
    /// All of `len` bytes free.
    pub(super) fn new(len: usize) -> Pieces {
        Pieces {
            free: if len > 0 { vec![(0, len)] } else { Vec::new() },
        }
    }

    /// Where [`take`](Self::take) would take `len` bytes (`len > 0`): the
    /// start of the smallest free range that holds them, or `None` if no
    /// range does.
    pub(super) fn fit(&self, len: usize) -> Option<usize> {
        self.free
            .iter()
            .filter(|&&(s, e)| e - s >= len)
            .min_by_key(|&&(s, e)| e - s)
            .map(|&(s, _)| s)
    }

    /// Take `len` bytes (`len > 0`) from the smallest free range that holds
    /// them, at its start; the offset, or `None` if no range does.
    pub(super) fn take(&mut self, len: usize) -> Option<usize> {
        let at = self.fit(len)?;
        self.remove(at, len);
        Some(at)
    }

    /// Give back the `len` bytes at `at` (taken with [`take`](Self::take)).
    pub(super) fn give(&mut self, at: usize, len: usize) {
        let end = at + len;
        let i = self.free.partition_point(|&(s, _)| s < at);
        debug_assert!(i == 0 || self.free[i - 1].1 <= at, "a piece given back twice");
        debug_assert!(
            i == self.free.len() || end <= self.free[i].0,
            "a piece given back twice"
        );
        let joins_prev = i > 0 && self.free[i - 1].1 == at;
        let joins_next = i < self.free.len() && self.free[i].0 == end;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.free[i - 1].1 = self.free[i].1;
                self.free.remove(i);
            }
            (true, false) => self.free[i - 1].1 = end,
            (false, true) => self.free[i].0 = at,
            (false, false) => self.free.insert(i, (at, end)),
        }
    }

    /// Remove `[at, at + len)` from the set, wherever it holds those bytes
    /// (ranges are cut or split); the bytes removed.
    pub(super) fn remove(&mut self, at: usize, len: usize) -> usize {
        let end = at + len;
        let mut removed = 0;
        let mut kept = Vec::with_capacity(self.free.len() + 1);
        for &(s, e) in &self.free {
            if e <= at || end <= s {
                kept.push((s, e));
                continue;
            }
            removed += e.min(end) - s.max(at);
            if s < at {
                kept.push((s, at));
            }
            if end < e {
                kept.push((end, e));
            }
        }
        self.free = kept;
        removed
    }

    /// The parts of `[at, at + len)` the set holds, as `[start, end)`
    /// ranges in order.
    pub(super) fn overlaps(&self, at: usize, len: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let end = at + len;
        self.free
            .iter()
            .filter(move |&&(s, e)| s < end && at < e)
            .map(move |&(s, e)| (s.max(at), e.min(end)))
    }

    /// The first range of the set, if it holds any bytes.
    pub(super) fn first(&self) -> Option<(usize, usize)> {
        self.free.first().copied()
    }

    /// Bytes free in all.
    #[cfg(test)]
    fn free_bytes(&self) -> usize {
        self.free.iter().map(|&(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_disjoint_and_merge_when_given_back() {
        let mut p = Pieces::new(10);
        let a = p.take(3).unwrap();
        let b = p.take(3).unwrap();
        let c = p.take(4).unwrap();
        assert_eq!((a, b, c), (0, 3, 6));
        assert_eq!(p.take(1), None, "all lent");
        // Back in any order: one free range again.
        p.give(b, 3);
        p.give(c, 4);
        assert_eq!(p.free, [(3, 10)]);
        p.give(a, 3);
        assert_eq!(p.free, [(0, 10)]);
        assert_eq!(p.take(10), Some(0));
        assert_eq!(p.take(1), None);
    }

    #[test]
    fn a_piece_comes_from_the_smallest_range_that_holds_it() {
        let mut p = Pieces::new(100);
        let pieces: Vec<usize> = [10, 30, 10, 50].iter().map(|&n| p.take(n).unwrap()).collect();
        // Free 10 at 0 and 30 at 10 (merged: 40 at 0), and 50 at 50.
        p.give(pieces[0], 10);
        p.give(pieces[1], 30);
        p.give(pieces[3], 50);
        assert_eq!(p.free, [(0, 40), (50, 100)]);
        // 35 fits both: the 40.
        assert_eq!(p.take(35), Some(0));
        // 45 fits only the 50.
        assert_eq!(p.take(45), Some(50));
        assert_eq!(p.free_bytes(), 5 + 5);
    }

    #[test]
    fn removing_cuts_and_splits_ranges_and_overlaps_clip_them() {
        let mut p = Pieces::new(100);
        assert_eq!(p.remove(10, 20), 20);
        assert_eq!(p.free, [(0, 10), (30, 100)]);
        // Across a hole: only the bytes the set held count.
        assert_eq!(p.remove(5, 30), 5 + 5);
        assert_eq!(p.free, [(0, 5), (35, 100)]);
        assert_eq!(p.overlaps(3, 40).collect::<Vec<_>>(), [(3, 5), (35, 43)]);
        assert_eq!(p.overlaps(5, 30).count(), 0);
        assert_eq!(p.remove(200, 10), 0);
        assert_eq!(p.remove(0, 100), 5 + 65);
        assert!(p.free.is_empty());
    }

    /// Random takes and gives never lend one byte twice and lose none.
    #[test]
    fn random_lending_keeps_every_byte_once() {
        let mut p = Pieces::new(1000);
        let mut held: Vec<(usize, usize)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !held.is_empty() {
                let (at, len) = held.swap_remove((x as usize / 3) % held.len());
                p.give(at, len);
            } else if let Some(at) = p.take(1 + (x as usize >> 8) % 120) {
                let len = 1 + (x as usize >> 8) % 120;
                assert!(held.iter().all(|&(a, l)| at + len <= a || a + l <= at), "overlap");
                held.push((at, len));
            }
            let lent: usize = held.iter().map(|&(_, l)| l).sum();
            assert_eq!(p.free_bytes() + lent, 1000);
        }
    }
}

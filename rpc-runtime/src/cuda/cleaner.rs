//! The cleaner: a thread of each [`CudaCopies`](super::CudaCopies) that
//! zeroes the bytes host methods wrote into lent memory (their out-buffers)
//! after the loan ends, so that the next call's out-buffers are lent zeroed
//! and the server thread, which a kernel is waiting for, writes each byte
//! once instead of zeroing it first.
//!
//! Ranges to zero come from loans given back ([`Lent::written`](crate::device_memory::Lent::written));
//! the cleaner takes them a chunk at a time out of its arena's free bytes,
//! zeroes the chunk without the pool's lock, then gives it back as free and
//! clean. A lender that finds no room while a chunk is out waits for it (at
//! most one chunk's zeroing, tens of microseconds), and the cleaner starts
//! no new chunk while anyone waits. Bytes a call lends again before they
//! are zeroed leave the list: the server zeroes what it needs of them
//! itself, as it does for memory lent without zeros.
//!
//! The invariant, under the pool's lock, per arena: `clean ⊆ free`,
//! `dirty ⊆ free \ clean`, and the chunk being zeroed is in none of the
//! three.

use std::sync::Arc;

use super::copy::{Pool, Shared};

/// Bytes the cleaner zeroes between two looks at the pool.
pub(super) const CHUNK_BYTES: usize = 1 << 20;

/// The cleaner's state, part of the pool (under its lock); its work is
/// each arena's `dirty` bytes.
#[derive(Default)]
pub(super) struct Cleaning {
    /// A chunk is out being zeroed (a lender that found no room may wait
    /// for it).
    pub(super) busy: bool,
    /// Lenders waiting for the busy chunk to come back.
    pub(super) waiting: usize,
    /// The copies are being dropped: the thread ends.
    pub(super) stop: bool,
    /// A thread was started (or could not be: then nothing is zeroed ahead).
    pub(super) started: bool,
}

/// The first dirty range of the first arena that has one: `(arena, start,
/// end)`.
pub(super) fn next_dirty(pool: &Pool) -> Option<(usize, usize, usize)> {
    pool.arenas
        .iter()
        .enumerate()
        .find_map(|(a, arena)| arena.dirty.first().map(|(s, e)| (a, s, e)))
}

/// The cleaner thread's loop, until the copies are dropped.
pub(super) fn run(shared: Arc<Shared>) {
    let mut pool = shared.lock();
    loop {
        if pool.cleaning.stop {
            return;
        }
        let next = next_dirty(&pool).filter(|_| pool.cleaning.waiting == 0);
        let Some((a, start, end)) = next else {
            pool = shared.work.wait(pool).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        // A chunk at a time.
        let stop = end.min(start + CHUNK_BYTES);
        let arena = &mut pool.arenas[a];
        arena.dirty.remove(start, stop - start);
        let taken = arena.free.remove(start, stop - start);
        debug_assert_eq!(taken, stop - start, "a dirty range is free");
        if taken != stop - start {
            continue;
        }
        let host = arena.host;
        pool.cleaning.busy = true;
        drop(pool);
        // SAFETY: `[start, stop)` lies in the arena's pinned allocation
        // (ranges come from its loans), which lives as long as the pool;
        // it was taken out of the arena's free bytes above, so no call is
        // lent it and no other thread touches it until it is given back.
        unsafe { core::ptr::write_bytes(host.as_ptr().add(start), 0, stop - start) };
        pool = shared.lock();
        let arena = &mut pool.arenas[a];
        arena.free.give(start, stop - start);
        arena.clean.give(start, stop - start);
        pool.cleaning.busy = false;
        pool.stats.cleaned_bytes += (stop - start) as u64;
        // Lenders (and threads waiting for a stage) look again.
        shared.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::arena::Arena;
    use super::super::copy::Shared;
    use super::*;

    /// Wait (at most 10 s) until the cleaner has nothing left to do.
    fn settle(shared: &Shared) {
        let t = Instant::now();
        loop {
            {
                let pool = shared.lock();
                if next_dirty(&pool).is_none() && !pool.cleaning.busy {
                    return;
                }
            }
            assert!(t.elapsed() < Duration::from_secs(10), "the cleaner never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Written ranges (one longer than a chunk, one split by a loan) are
    /// zeroed and become clean; bytes outside them, and bytes lent again
    /// before the cleaner got to them, are left as they are; the thread
    /// ends when asked.
    #[test]
    fn written_ranges_are_zeroed_and_become_clean() {
        const LEN: usize = 8 << 20;
        let shared = Arc::new(Shared::new());
        shared.lock().arenas.push(Arena::on_heap(LEN, 0xab));
        let (a0, a1) = (64 << 10, (64 << 10) + 3 * CHUNK_BYTES + 5);
        let (b0, b1) = (5 << 20, 7 << 20);
        {
            let mut pool = shared.lock();
            pool.arenas[0].dirty.give(a0, a1 - a0);
            pool.arenas[0].dirty.give(b0, b1 - b0);
            // The middle MiB of the second range is lent again (taken out of
            // the free and dirty bytes as a loan is) before any cleaning.
            let lent = pool.arenas[0].free.remove(6 << 20, 1 << 20);
            assert_eq!(lent, 1 << 20);
            pool.arenas[0].dirty.remove(6 << 20, 1 << 20);
        }
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || run(shared))
        };
        shared.work.notify_all();
        settle(&shared);
        {
            let pool = shared.lock();
            let arena = &pool.arenas[0];
            let bytes = arena.bytes();
            let zero = |r: std::ops::Range<usize>| bytes[r].iter().all(|&b| b == 0);
            let untouched = |r: std::ops::Range<usize>| bytes[r].iter().all(|&b| b == 0xab);
            assert!(zero(a0..a1) && zero(b0..6 << 20), "written bytes are zeroed");
            assert!(untouched(0..a0) && untouched(a1..b0), "other bytes are left");
            assert!(untouched(6 << 20..LEN), "bytes lent again are the loan's");
            let clean: Vec<_> = arena.clean.overlaps(0, LEN).collect();
            assert_eq!(clean, [(a0, a1), (b0, 6 << 20)]);
            // Every byte is free again but the lent MiB.
            let free: Vec<_> = arena.free.overlaps(0, LEN).collect();
            assert_eq!(free, [(0, 6 << 20), (7 << 20, LEN)]);
        }
        shared.lock().cleaning.stop = true;
        shared.work.notify_all();
        thread.join().unwrap();
    }

    /// While a lender waits, the cleaner starts no new chunk.
    #[test]
    fn no_chunk_starts_while_a_lender_waits() {
        let shared = Arc::new(Shared::new());
        shared.lock().arenas.push(Arena::on_heap(4 << 20, 1));
        {
            let mut pool = shared.lock();
            pool.cleaning.waiting = 1;
            pool.arenas[0].dirty.give(0, 2 << 20);
        }
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || run(shared))
        };
        shared.work.notify_all();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            shared.lock().arenas[0].bytes().iter().all(|&b| b == 1),
            "nothing zeroed"
        );
        shared.lock().cleaning.waiting = 0;
        shared.work.notify_all();
        settle(&shared);
        assert!(shared.lock().arenas[0].bytes()[..2 << 20].iter().all(|&b| b == 0));
        shared.lock().cleaning.stop = true;
        shared.work.notify_all();
        thread.join().unwrap();
    }
}

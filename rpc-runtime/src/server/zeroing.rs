//! Zeroing the bytes of an out-buffer that a host method is about to be
//! handed, where its lender did not lend them as zeros: a span of
//! [`WIDE_BYTES`] or more is zeroed by [`THREADS`] threads at once, since
//! one core's stores reach only a part of the memory's bandwidth (a 64 MiB
//! out-buffer's zeroing took as long as the host method's own fill of it,
//! BENCHMARKS.md, workload 3).

/// Spans at least this long are zeroed on several threads (a thread's
/// start, some tens of microseconds, is then under a tenth of the work).
pub(super) const WIDE_BYTES: usize = 8 << 20;

/// Threads that zero a wide span, the server thread included (fewer on a
/// machine with fewer cores).
pub(super) const THREADS: usize = 4;

/// [`THREADS`], or the cores the OS gives this process if fewer.
fn threads() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    THREADS.min(cores)
}

/// Zero the `len` bytes at `p`.
///
/// # Safety
/// `[p, p + len)` is writable memory that nothing else reads or writes
/// until this returns.
pub(super) unsafe fn zero(p: *mut u8, len: usize) {
    let threads = threads();
    if len < WIDE_BYTES || threads == 1 {
        // SAFETY: the caller's promise.
        unsafe { core::ptr::write_bytes(p, 0, len) };
        return;
    }
    // Parts of whole pages: for a page-aligned span, no two threads store
    // to one cache line.
    let part = len.div_ceil(threads).next_multiple_of(4096);
    // The address as an integer: a raw pointer is not `Send`.
    let base = p as usize;
    // Part `k`: `[k * part, (k + 1) * part)` of the span, cut at its end.
    let zero_part = move |k: usize| {
        let (a, b) = ((k * part).min(len), ((k + 1) * part).min(len));
        // SAFETY: `[a, b)` lies in the caller's span, and no other part
        // overlaps it; every part is done before `zero` returns (the scope
        // below joins its threads).
        unsafe { core::ptr::write_bytes((base + a) as *mut u8, 0, b - a) }
    };
    std::thread::scope(|s| {
        for k in (1..threads).filter(|&k| k * part < len) {
            let spawned = std::thread::Builder::new()
                .name("gpu-rpc-zero".into())
                .spawn_scoped(s, move || zero_part(k));
            if spawned.is_err() {
                // No thread to be had: this part on this one.
                zero_part(k);
            }
        }
        zero_part(0);
    });
}

/// Zero the byte ranges `ranges` of `place` (offsets from its start,
/// within it), on this thread alone: the bytes of an out-buffer that did not
/// come as zeros, zeroed by the thread that runs its lane's host method (the
/// lanes are spread over threads already).
///
/// # Safety
/// Every byte pattern of `T` is a value
/// ([`bytes_are_values`](crate::wire::bytes_are_values)), so the zeroed
/// elements are valid.
pub(super) unsafe fn zero_ranges<T>(place: &mut [T], ranges: &[core::ops::Range<usize>]) {
    let bytes = core::mem::size_of_val(place);
    let p = place.as_mut_ptr().cast::<u8>();
    for r in ranges {
        assert!(r.start <= r.end && r.end <= bytes, "zero {r:?} of {bytes} bytes");
        // SAFETY: `[r.start, r.end)` lies in `place` (checked above), which
        // is borrowed mutably here; zeros are values of `T` (the caller's
        // promise).
        unsafe { core::ptr::write_bytes(p.add(r.start), 0, r.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans below, at and above the wide size, at an odd offset: every
    /// byte of the span is zero, the bytes around it untouched.
    #[test]
    fn every_byte_of_the_span_and_none_beside_it() {
        for len in [0, 1, 4097, WIDE_BYTES - 1, WIDE_BYTES, WIDE_BYTES + 3 * 4096 + 5] {
            let mut buf = vec![0xa5u8; len + 16];
            // SAFETY: `[3, 3 + len)` lies in `buf`, which nothing else uses.
            unsafe { zero(buf.as_mut_ptr().add(3), len) };
            assert!(buf[..3].iter().all(|&b| b == 0xa5), "{len}: before");
            assert!(buf[3..3 + len].iter().all(|&b| b == 0), "{len}: span");
            assert!(buf[3 + len..].iter().all(|&b| b == 0xa5), "{len}: after");
        }
    }
}

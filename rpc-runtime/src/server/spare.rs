//! Large byte buffers a server thread keeps between calls, for the slices
//! that go direct but find no memory lent for them (a GPU's pinned budget
//! taken by other calls or smaller than the slice, or a backend that lends
//! none): the streamed inputs copied
//! from the device into them, and the host methods' out-buffers written in
//! them. A fresh buffer of megabytes costs a page fault per page on its
//! first pass; one kept from an earlier call of that size does not (on the
//! build machine, 64 MiB allocated, zeroed and filled took 90-100 ms; the
//! same bytes copied into a kept buffer 12-15 ms).
//!
//! A kept buffer's bytes stay initialized (its length is as far as it was
//! ever written), so a buffer the copy from the device fills next needs no
//! zeroing pass first; an out-buffer is zeroed before a host method sees
//! it. How much a thread keeps is [`ServerConfig::keep_bytes`](crate::server::ServerConfig::keep_bytes).

/// Buffers shorter than this are not worth keeping here (the scratch keeps
/// small ones in place).
pub(super) const SPARE_MIN_BYTES: usize = 64 << 10;

/// A server thread's kept buffers, each with its bytes initialized.
#[derive(Default)]
pub(super) struct Spare {
    bufs: Vec<Vec<u8>>,
}

impl Spare {
    /// A buffer of `len` initialized bytes (contents unspecified: an earlier
    /// call's, or zeros), whose address is a multiple of `align`: the
    /// smallest kept one that holds `len` (cut to `len`, grown with zeros),
    /// else a new one; `None` if the host cannot allocate it.
    pub(super) fn take(&mut self, len: usize, align: usize) -> Option<Vec<u8>> {
        let fits = |b: &Vec<u8>| b.capacity() >= len && (b.as_ptr() as usize).is_multiple_of(align);
        let best = (0..self.bufs.len())
            .filter(|&i| fits(&self.bufs[i]))
            .min_by_key(|&i| self.bufs[i].capacity());
        let mut buf = match best {
            Some(i) => self.bufs.swap_remove(i),
            None => {
                let mut b = Vec::new();
                b.try_reserve_exact(len).ok()?;
                if !(b.as_ptr() as usize).is_multiple_of(align) {
                    return None;
                }
                b
            }
        };
        if buf.len() > len {
            buf.truncate(len);
        } else {
            buf.resize(len, 0);
        }
        Some(buf)
    }

    /// Keep `buf` for a later call (its bytes as they are), if it is large
    /// enough to be worth it.
    pub(super) fn give(&mut self, buf: Vec<u8>) {
        if buf.capacity() >= SPARE_MIN_BYTES {
            self.bufs.push(buf);
        }
    }

    /// Capacity of the kept buffers, in bytes.
    pub(super) fn bytes(&self) -> usize {
        self.bufs.iter().map(Vec::capacity).sum()
    }

    /// Free the largest kept buffers until at most `keep` bytes are kept;
    /// returns what is kept.
    pub(super) fn trim(&mut self, keep: usize) -> usize {
        self.bufs.sort_unstable_by_key(Vec::capacity);
        let mut total = self.bytes();
        while total > keep {
            let Some(b) = self.bufs.pop() else { break };
            total -= b.capacity();
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_is_reused_for_a_call_it_holds() {
        let mut s = Spare::default();
        let mut b = s.take(1 << 20, 16).unwrap();
        b.fill(7);
        let at = b.as_ptr();
        s.give(b);
        // Smaller: the same memory, cut, its bytes kept (initialized).
        let b = s.take(100_000, 16).unwrap();
        assert_eq!(b.as_ptr(), at);
        assert_eq!(b.len(), 100_000);
        assert!(b.iter().all(|&x| x == 7));
        s.give(b);
        // Larger than its capacity: a new one.
        let c = s.take((1 << 20) + 1, 16).unwrap();
        assert_ne!(c.as_ptr(), at);
        s.give(c);
        assert_eq!(s.bufs.len(), 2);
    }

    #[test]
    fn growing_a_kept_buffer_zeroes_only_what_was_never_written() {
        let mut s = Spare::default();
        let mut b = s.take(1 << 20, 1).unwrap();
        b.fill(1);
        b.truncate(10);
        s.give(b);
        let b = s.take(20, 1).unwrap();
        assert_eq!(&b[..10], [1; 10]);
        assert_eq!(&b[10..], [0; 10]);
    }

    #[test]
    fn trimming_frees_the_largest_first() {
        let mut s = Spare::default();
        for n in [SPARE_MIN_BYTES, 4 * SPARE_MIN_BYTES, 2 * SPARE_MIN_BYTES] {
            s.give(Vec::with_capacity(n));
        }
        // Too small to keep.
        s.give(Vec::with_capacity(100));
        assert_eq!(s.bufs.len(), 3);
        let kept = s.trim(3 * SPARE_MIN_BYTES);
        assert!(kept <= 3 * SPARE_MIN_BYTES);
        assert!(s.bufs.iter().all(|b| b.capacity() < 4 * SPARE_MIN_BYTES));
        assert_eq!(s.trim(0), 0);
        assert!(s.bufs.is_empty());
    }
}

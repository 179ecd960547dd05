//! [`LaneRecords`]: one fixed-size byte record per lane, stored flat in one
//! buffer. A call's argument blocks and return values are this shape (every
//! lane's is as long as the frame says); one buffer, reset once per call,
//! costs a server thread far less than a `Vec` per lane that each pass
//! clears, resizes and reaches through a pointer.

/// Per-lane byte records of one length, lane `l`'s at `l * stride`.
#[derive(Debug, Default)]
pub(crate) struct LaneRecords {
    bytes: Vec<u8>,
    /// Bytes of each record.
    len: usize,
    /// Distance between records: `len` rounded up to a whole word, so that
    /// records move to and from packets a word at a time.
    stride: usize,
    /// Lanes with a record (`0..count`): `bytes.len() == count * stride`
    /// and `len <= stride`, so the record of a lane below `count` lies
    /// inside `bytes` (the one invariant the accessors' checks rest on).
    count: usize,
}

impl LaneRecords {
    /// Make room for a record of `len` zero bytes for every lane up to the
    /// highest of `lanes`. Reuses the buffer: allocates only when a call
    /// needs more than any before it on this thread (bounded by the frame:
    /// at most 64 lanes of `MAX_ARG_BYTES` plus the length words).
    pub(crate) fn reset(&mut self, len: usize, lanes: u64) {
        self.len = len;
        self.stride = len.next_multiple_of(8);
        self.count = (u64::BITS - lanes.leading_zeros()) as usize;
        self.bytes.clear();
        self.bytes.resize(self.count * self.stride, 0);
    }

    /// Where lane `lane`'s record starts, if it has one. One comparison per
    /// lane (the server's per-lane path): a lane below `count` has its
    /// whole record, and a whole word from any of its word offsets below
    /// `len`, inside `bytes`.
    #[inline(always)]
    fn start(&self, lane: u32) -> Option<usize> {
        ((lane as usize) < self.count).then(|| lane as usize * self.stride)
    }

    /// Lane `lane`'s record (empty for a lane `reset` made no room for).
    #[inline]
    pub(crate) fn get(&self, lane: u32) -> &[u8] {
        match self.start(lane) {
            // SAFETY: `at + len <= (lane + 1) * stride <= count * stride ==
            // bytes.len()` (the invariant on `count`).
            Some(at) => unsafe { self.bytes.get_unchecked(at..at + self.len) },
            None => &[],
        }
    }

    /// Set bytes `8 * k .. 8 * k + 8` of lane `lane`'s record to the
    /// little-endian word `v` (a record whose length is not a whole number
    /// of words takes the rest of its last word in its padding; nothing for
    /// a lane `reset` made no room for). Always whole words: the server's
    /// hot path, a single store.
    #[inline]
    pub(crate) fn set_word(&mut self, lane: u32, k: usize, v: u64) {
        if let Some(at) = self.word_start(lane, k) {
            // SAFETY: `word_start` gave a whole word inside `bytes`.
            unsafe { self.bytes.get_unchecked_mut(at..at + 8) }.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Where word `k` of lane `lane`'s record starts, if the lane has a
    /// record and the record a byte at `8 * k`. Then the whole word lies
    /// inside `bytes`: `8 * k < len` makes `8 * k + 8 <= stride` (a whole
    /// number of words), inside the lane's stride, inside `bytes` (the
    /// invariant on `count`).
    #[inline(always)]
    fn word_start(&self, lane: u32, k: usize) -> Option<usize> {
        if 8 * k < self.len {
            self.start(lane).map(|at| at + 8 * k)
        } else {
            None
        }
    }

    /// Bytes `8 * k ..` of lane `lane`'s record as a little-endian word,
    /// zero past the record's end.
    #[inline]
    pub(crate) fn word(&self, lane: u32, k: usize) -> u64 {
        let Some(at) = self.word_start(lane, k) else { return 0 };
        let mut b = [0; 8];
        // SAFETY: `word_start` gave a whole word inside `bytes`.
        b.copy_from_slice(unsafe { self.bytes.get_unchecked(at..at + 8) });
        let w = u64::from_le_bytes(b);
        // The record's bytes in this word (`8 * k < len`: at least one).
        let n = self.len - 8 * k;
        if n < 8 {
            w & ((1u64 << (8 * n)) - 1)
        } else {
            w
        }
    }

    /// Word `k` of every lane's record, as [`word`](Self::word) gives it,
    /// with what does not depend on the lane worked out once: the reply's
    /// rows are written from these, a load and a mask a lane.
    #[inline]
    pub(crate) fn column(&self, k: usize) -> WordColumn<'_> {
        // The record's bytes in word `k` (0 when the record ends before it).
        let n = self.len.saturating_sub(8 * k);
        WordColumn {
            bytes: &self.bytes,
            at: 8 * k,
            stride: self.stride,
            // No lane has a word the record does not reach.
            count: if n == 0 { 0 } else { self.count },
            mask: if n >= 8 { u64::MAX } else { (1u64 << (8 * n)) - 1 },
        }
    }

    /// Lane `lane`'s record, to write (empty for a lane `reset` made no
    /// room for).
    #[inline]
    pub(crate) fn get_mut(&mut self, lane: u32) -> &mut [u8] {
        match self.start(lane) {
            // SAFETY: as in `get`.
            Some(at) => unsafe { self.bytes.get_unchecked_mut(at..at + self.len) },
            None => &mut [],
        }
    }
}

/// Word `k` of every lane's record ([`LaneRecords::column`]).
pub(crate) struct WordColumn<'r> {
    bytes: &'r [u8],
    /// `8 * k`.
    at: usize,
    stride: usize,
    /// Lanes with the word: the records' `count`, or 0 when `8 * k` is not
    /// below the records' length. So a lane below `count` has the whole
    /// word inside `bytes`: `8 * k < len <= stride`, `stride` a whole number
    /// of words, so `at + 8 <= stride`, inside the lane's stride, inside
    /// `bytes` (the records' invariant on `count`).
    count: usize,
    /// The record's bytes of the word (all of them but in the last word of
    /// a record that is not a whole number of words).
    mask: u64,
}

impl WordColumn<'_> {
    /// Lane `lane`'s word (0 for a lane without a record or a record that
    /// ends before the word).
    #[inline(always)]
    pub(crate) fn get(&self, lane: u32) -> u64 {
        if (lane as usize) >= self.count {
            return 0;
        }
        let at = lane as usize * self.stride + self.at;
        let mut b = [0; 8];
        // SAFETY: a lane below `count` has the whole word inside `bytes`
        // (the invariant on `count`).
        b.copy_from_slice(unsafe { self.bytes.get_unchecked(at..at + 8) });
        u64::from_le_bytes(b) & self.mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_zeroed_per_reset_and_kept_apart() {
        let mut r = LaneRecords::default();
        r.reset(12, 0b1010);
        r.get_mut(1).copy_from_slice(&[1; 12]);
        r.get_mut(3).copy_from_slice(&[3; 12]);
        assert_eq!(r.get(1), [1; 12]);
        assert_eq!(r.get(3), [3; 12]);
        assert_eq!(r.get(2), [0; 12], "a lane between holds zeros");
        assert!(
            r.get(4).is_empty() && r.get_mut(63).is_empty(),
            "no room past the highest lane"
        );
        // The next call starts from zeros, at its own length.
        r.reset(8, 1 << 63);
        assert_eq!(r.get(1), [0; 8]);
        assert_eq!(r.get(63), [0; 8]);
        r.reset(0, u64::MAX);
        assert!(r.get(0).is_empty());
    }

    #[test]
    fn words_move_whole_and_stop_at_the_record_end() {
        let mut r = LaneRecords::default();
        r.reset(12, 0b11);
        r.set_word(1, 0, 0x0807_0605_0403_0201);
        r.set_word(1, 1, 0x1817_1615_1413_1211);
        r.set_word(1, 2, u64::MAX);
        assert_eq!(r.get(1), [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14]);
        // The padding holds the rest of the last word; `word` never shows it.
        r.set_word(0, 1, u64::MAX);
        assert_eq!(r.get(0)[8..], [0xff; 4]);
        assert_eq!(r.word(0, 1), 0xffff_ffff);
        r.set_word(0, 1, 0);
        assert_eq!(r.get(0), [0; 12], "the lane before is untouched");
        assert_eq!(r.word(1, 0), 0x0807_0605_0403_0201);
        assert_eq!(r.word(1, 1), 0x1413_1211, "cut at the record's end");
        assert_eq!(r.word(1, 2), 0);
        assert_eq!(r.word(5, 0), 0, "a lane without room");
        r.set_word(5, 0, 1);
    }

    /// Every length, lane and word offset against a model of one `Vec` per
    /// lane: the accessors' single comparison per lane never reaches past a
    /// record or the buffer, whatever the call asks.
    #[test]
    fn every_lane_and_word_matches_a_model() {
        let mut r = LaneRecords::default();
        for len in 0..=40usize {
            for lanes in [0u64, 1, 0b100, 0x8000_0000, u64::MAX] {
                r.reset(len, lanes);
                let count = (64 - lanes.leading_zeros()) as usize;
                let mut model: Vec<Vec<u8>> = (0..count).map(|_| vec![0; len]).collect();
                for lane in 0..64u32 {
                    for k in 0..7usize {
                        let v = 0x0101_0101_0101_0101u64.wrapping_mul(lane as u64 * 7 + k as u64 + 1);
                        r.set_word(lane, k, v);
                        if let Some(m) = model.get_mut(lane as usize) {
                            let bytes = v.to_le_bytes();
                            let end = (8 * k + 8).min(len);
                            if 8 * k < len {
                                m[8 * k..end].copy_from_slice(&bytes[..end - 8 * k]);
                            }
                        }
                    }
                }
                for lane in 0..70u32 {
                    let want: &[u8] = model.get(lane as usize).map_or(&[], |m| m.as_slice());
                    assert_eq!(r.get(lane), want, "len {len}, lanes {lanes:#x}, lane {lane}");
                    assert_eq!(r.get_mut(lane).len(), want.len());
                    for k in 0..7usize {
                        let mut w = [0u8; 8];
                        if 8 * k < want.len() {
                            let end = (8 * k + 8).min(want.len());
                            w[..end - 8 * k].copy_from_slice(&want[8 * k..end]);
                        }
                        assert_eq!(
                            r.word(lane, k),
                            u64::from_le_bytes(w),
                            "len {len}, lane {lane}, word {k}"
                        );
                        assert_eq!(
                            r.column(k).get(lane),
                            u64::from_le_bytes(w),
                            "column: len {len}, lane {lane}, word {k}"
                        );
                    }
                }
            }
        }
    }
}

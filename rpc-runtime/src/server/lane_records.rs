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
}

impl LaneRecords {
    /// Make room for a record of `len` zero bytes for every lane up to the
    /// highest of `lanes`. Reuses the buffer: allocates only when a call
    /// needs more than any before it on this thread (bounded by the frame:
    /// at most 64 lanes of `MAX_ARG_BYTES` plus the length words).
    pub(crate) fn reset(&mut self, len: usize, lanes: u64) {
        self.len = len;
        self.stride = len.next_multiple_of(8);
        let count = (u64::BITS - lanes.leading_zeros()) as usize;
        self.bytes.clear();
        self.bytes.resize(count * self.stride, 0);
    }

    /// Lane `lane`'s record (empty for a lane `reset` made no room for).
    pub(crate) fn get(&self, lane: u32) -> &[u8] {
        let at = lane as usize * self.stride;
        self.bytes.get(at..at + self.len).unwrap_or_default()
    }

    /// Set bytes `8 * k .. 8 * k + 8` of lane `lane`'s record to the
    /// little-endian word `v` (a record whose length is not a whole number
    /// of words takes the rest of its last word in its padding; nothing for
    /// a lane `reset` made no room for). Always whole words: the server's
    /// hot path, a single store.
    pub(crate) fn set_word(&mut self, lane: u32, k: usize, v: u64) {
        if 8 * k < self.len {
            let at = lane as usize * self.stride + 8 * k;
            if let Some(dst) = self.bytes.get_mut(at..at + 8) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// Bytes `8 * k ..` of lane `lane`'s record as a little-endian word,
    /// zero past the record's end.
    pub(crate) fn word(&self, lane: u32, k: usize) -> u64 {
        let Some(n) = self.len.checked_sub(8 * k).filter(|&n| n > 0) else {
            return 0;
        };
        let at = lane as usize * self.stride + 8 * k;
        let w = self
            .bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        if n < 8 {
            w & ((1u64 << (8 * n)) - 1)
        } else {
            w
        }
    }

    /// Lane `lane`'s record, to write (empty for a lane `reset` made no
    /// room for).
    pub(crate) fn get_mut(&mut self, lane: u32) -> &mut [u8] {
        let at = lane as usize * self.stride;
        self.bytes.get_mut(at..at + self.len).unwrap_or_default()
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
}

//! A line of text built on the device without `core::fmt`: the example
//! kernels that hand a ready-made `&str` to a service of their own
//! (`HostServices::print_stderr`, `Bench::log`) build it with this.
//! `core::fmt` would cost every kernel of the crate registers (README
//! "Device footprint"); `gpu_println!` needs neither, it formats on the host.

/// A fixed buffer of text (no allocation on a GPU); what does not fit is
/// dropped.
pub struct Line {
    buf: [u8; 96],
    len: usize,
}

impl Line {
    /// An empty line.
    pub fn new() -> Self {
        Line { buf: [0; 96], len: 0 }
    }

    /// Append `s` (cut at the end of the buffer).
    pub fn str(&mut self, s: &str) -> &mut Self {
        for (d, c) in self.buf.iter_mut().skip(self.len).zip(s.bytes()) {
            *d = c;
            self.len += 1;
        }
        self
    }

    /// Append `v` in decimal.
    pub fn num(&mut self, mut v: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let mut n = 0;
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in digits[..n].iter().rev() {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = d;
                self.len += 1;
            }
        }
        self
    }

    /// The text: its longest valid UTF-8 prefix (a cut may split a
    /// character).
    pub fn as_str(&self) -> &str {
        let bytes = &self.buf[..self.len];
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
        }
    }
}

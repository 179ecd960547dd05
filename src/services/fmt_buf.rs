//! Bounded formatting on the device ([`FmtBuf`], [`format_line`],
//! [`print_fmt`]) and the print macros `gpu_print!`, `gpu_println!`,
//! `gpu_eprint!` and `gpu_eprintln!`.

use core::fmt;

use super::{with_std, Fd, LINE_MAX, TRUNCATION_MARKER};
#[cfg(doc)]
use super::{DevicePrint, IoError, Std};

/// A fixed-capacity `core::fmt::Write` buffer on the stack (no allocation):
/// what the print macros and the panic handler format into.
///
/// Text past `N` bytes is dropped (at a character boundary, so the contents
/// stay valid UTF-8) and the buffer remembers it;
/// [`finish`](Self::finish) then cuts the text to leave room for
/// [`TRUNCATION_MARKER`] and the optional newline.
///
/// ```
/// use core::fmt::Write;
/// use gpu_rpc::services::FmtBuf;
///
/// let mut b = FmtBuf::<32>::new();
/// let _ = write!(b, "x = {}", 42);
/// assert_eq!(b.finish(true), "x = 42\n");
///
/// let mut b = FmtBuf::<32>::new();
/// let _ = write!(b, "{}", "abcdefghij".repeat(5));
/// assert!(b.is_truncated());
/// let line = b.finish(true);
/// assert_eq!(line, "abcdefghijabcdefg…[truncated]\n");
/// assert_eq!(line.len(), 32);
/// ```
pub struct FmtBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    truncated: bool,
}

impl<const N: usize> FmtBuf<N> {
    const ROOM: () = assert!(
        N > TRUNCATION_MARKER.len() + 1,
        "FmtBuf needs room for the marker and a newline"
    );

    /// An empty buffer.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::ROOM;
        FmtBuf {
            buf: [0; N],
            len: 0,
            truncated: false,
        }
    }

    /// The text so far (always valid UTF-8).
    pub fn as_str(&self) -> &str {
        // SAFETY: only whole UTF-8 sequences are ever stored (`write_str`
        // and `finish` cut at character boundaries), so `buf[..len]` is valid
        // UTF-8.
        unsafe { core::str::from_utf8_unchecked(&self.buf[..self.len]) }
    }

    /// Bytes stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether text was dropped because the buffer was full.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Forget the contents.
    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }

    /// Append what fits of `s`, cut at a character boundary; returns whether
    /// all of it fit.
    fn push(&mut self, s: &str) -> bool {
        let room = N - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        n == s.len()
    }

    /// Mark the text as cut (as if something had been dropped), so that
    /// [`finish`](Self::finish) ends it with [`TRUNCATION_MARKER`].
    pub fn mark_truncated(&mut self) {
        self.truncated = true;
    }

    /// The finished text: if anything was dropped, or the newline would not
    /// fit, the text is cut at a character boundary and ends with
    /// [`TRUNCATION_MARKER`]; then a `'\n'` if `newline`. At most `N` bytes.
    pub fn finish(&mut self, newline: bool) -> &str {
        let nl = newline as usize;
        if self.truncated || self.len + nl > N {
            self.truncated = true;
            let mut cut = self.len.min(N - TRUNCATION_MARKER.len() - nl);
            // A byte 0b10xx_xxxx continues a character: back up to its start.
            while cut < self.len && (self.buf[cut] as i8) < -0x40 {
                cut -= 1;
            }
            self.len = cut;
            self.push(TRUNCATION_MARKER);
        }
        if newline {
            self.push("\n");
        }
        self.as_str()
    }
}

impl<const N: usize> Default for FmtBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for FmtBuf<N> {
    /// Appends what fits; once full, returns `Err` so formatting stops early
    /// (the text kept is still valid).
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.truncated {
            return Err(fmt::Error);
        }
        if self.push(s) {
            Ok(())
        } else {
            self.truncated = true;
            Err(fmt::Error)
        }
    }
}

impl<const N: usize> fmt::Debug for FmtBuf<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FmtBuf")
            .field("text", &self.as_str())
            .field("truncated", &self.truncated)
            .finish()
    }
}

/// Format `args` into a [`LINE_MAX`]-byte buffer: the exact bytes a print
/// macro sends (with [`TRUNCATION_MARKER`] if cut, then `'\n'` if `newline`).
///
/// ```
/// use gpu_rpc::services::{format_line, FmtBuf, LINE_MAX};
/// let mut buf = FmtBuf::new();
/// assert_eq!(format_line(&mut buf, format_args!("{}-{}", 1, 2), true), "1-2\n");
/// let long = "é".repeat(400); // 800 bytes
/// let line = format_line(&mut buf, format_args!("{long}"), true);
/// assert!(line.ends_with("…[truncated]\n") && line.len() <= LINE_MAX);
/// ```
pub fn format_line<'b>(buf: &'b mut FmtBuf<LINE_MAX>, args: fmt::Arguments<'_>, newline: bool) -> &'b str {
    buf.clear();
    let _ = fmt::write(buf, args);
    buf.finish(newline)
}

/// Format `args` **on this lane** with `core::fmt` (see [`format_line`]) and
/// write the line to `stream` on the host with one [`Std::write`] call: for
/// values without a [`DevicePrint`] impl. The print macros format on the
/// host instead; `core::fmt` on a GPU costs every kernel that can reach it
/// the registers of its hungriest formatter (about 170 on sm_90).
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, Fd, StdHost, StdHostConfig, StdServer};
/// # let (config, out, _) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// #[derive(Debug)]
/// struct Point { x: i32, y: i32 }
/// services::print_fmt(Fd::STDOUT, format_args!("{:?}", Point { x: 1, y: 2 }), true);
/// # })).unwrap();
/// # assert_eq!(out.text(), "Point { x: 1, y: 2 }\n");
/// ```
///
/// The host's [`IoError`] (a failing sink) is ignored; a failed call (no
/// client bound, the host does not serve [`Std`]) panics.
pub fn print_fmt(stream: Fd, args: fmt::Arguments<'_>, newline: bool) {
    let mut buf = FmtBuf::<LINE_MAX>::new();
    let line = format_line(&mut buf, args, newline);
    let _ = with_std(|s| s.write(stream, line.as_bytes()));
}

/// Print to the host's stdout, formatted on the host: one [`Std::print`]
/// call carrying the values (see [`services`](crate::services#printing) for
/// the format syntax and the value types; a mistake in the string is a
/// compile error, as with `print!`).
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, out, _) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// gpu_rpc::gpu_print!("no newline, {}", "formatted on the device");
/// # })).unwrap();
/// # assert_eq!(out.text(), "no newline, formatted on the device");
/// ```
#[macro_export]
macro_rules! gpu_print {
    ($($arg:tt)*) => {
        $crate::__print!($crate::services::Fd::STDOUT, false; $($arg)*)
    };
}

/// [`gpu_print!`](crate::gpu_print) followed by a newline, sent in the same
/// call: the line is never interleaved with another lane's.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, out, _) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// gpu_rpc::gpu_println!("x = {}", 7);
/// gpu_rpc::gpu_println!();
/// # })).unwrap();
/// # assert_eq!(out.text(), "x = 7\n\n");
/// ```
#[macro_export]
macro_rules! gpu_println {
    () => {
        $crate::services::print_host($crate::services::Fd::STDOUT, true, "", &[])
    };
    ($($arg:tt)*) => {
        $crate::__print!($crate::services::Fd::STDOUT, true; $($arg)*)
    };
}

/// [`gpu_print!`](crate::gpu_print) to the host's stderr.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, _, err) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// gpu_rpc::gpu_eprint!("warning: {}", 1);
/// # })).unwrap();
/// # assert_eq!(err.text(), "warning: 1");
/// ```
#[macro_export]
macro_rules! gpu_eprint {
    ($($arg:tt)*) => {
        $crate::__print!($crate::services::Fd::STDERR, false; $($arg)*)
    };
}

/// [`gpu_println!`](crate::gpu_println) to the host's stderr.
///
/// ```
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, _, err) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// gpu_rpc::gpu_eprintln!("error: {}", "details");
/// # })).unwrap();
/// # assert_eq!(err.text(), "error: details\n");
/// ```
#[macro_export]
macro_rules! gpu_eprintln {
    () => {
        $crate::services::print_host($crate::services::Fd::STDERR, true, "", &[])
    };
    ($($arg:tt)*) => {
        $crate::__print!($crate::services::Fd::STDERR, true; $($arg)*)
    };
}

//! Host-formatted printing, device side (`no_std`): what
//! [`gpu_println!`](crate::gpu_println) and friends send. The macro checks
//! the format string at compile time and normalizes it
//! ([`rpc_runtime::format_spec`]); at run time the device only packs each
//! value into two words ([`PrintArg`]) and makes one [`Std::print`] call; the
//! host formats (`services/format.rs`). No `core::fmt` runs on the device, so a
//! print costs a kernel few registers (README "Device footprint").

use super::{with_std, Fd, IoError, LINE_MAX};

/// Most values one print sends (the macro refuses more at compile time).
pub const MAX_PRINT_ARGS: usize = 32;

/// What kind of value a [`PrintArg`] carries (its first word's low byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PrintKind {
    /// An unsigned integer (`u8` ..= `u64`, `usize`), zero-extended.
    Unsigned = 1,
    /// A signed integer (`i8` ..= `i64`, `isize`), sign-extended.
    Signed = 2,
    /// An `f32`, its bits in the low half.
    F32 = 3,
    /// An `f64`'s bits.
    F64 = 4,
    /// A `bool` (0 or 1).
    Bool = 5,
    /// A `char` (its scalar value).
    Char = 6,
    /// A `str`: its bytes travel in the call's text stream.
    Str = 7,
    /// An [`IoError`]'s errno, formatted as the error's `Display`.
    IoError = 8,
}

impl PrintKind {
    /// The kind for a raw byte.
    ///
    /// ```
    /// use gpu_rpc::services::PrintKind;
    /// assert_eq!(PrintKind::from_u8(7), Some(PrintKind::Str));
    /// assert_eq!(PrintKind::from_u8(0), None);
    /// ```
    pub const fn from_u8(v: u8) -> Option<PrintKind> {
        Some(match v {
            1 => PrintKind::Unsigned,
            2 => PrintKind::Signed,
            3 => PrintKind::F32,
            4 => PrintKind::F64,
            5 => PrintKind::Bool,
            6 => PrintKind::Char,
            7 => PrintKind::Str,
            8 => PrintKind::IoError,
            _ => return None,
        })
    }
}

/// One value of a print, as it crosses: a kind, the integer's width in bytes
/// (so `{:x}` of `-1i8` is `ff`, as in Rust), the bits, and for a `str` its
/// text.
#[derive(Clone, Copy, Debug)]
pub struct PrintArg<'a> {
    kind: PrintKind,
    width: u8,
    bits: u64,
    text: &'a str,
}

impl<'a> PrintArg<'a> {
    /// The print argument for `v` (what the macros wrap every value in).
    ///
    /// ```
    /// use gpu_rpc::services::{PrintArg, PrintKind};
    /// assert_eq!(PrintArg::new(&-1i8).words(0), [PrintKind::Signed as u64 | 1 << 8, u64::MAX]);
    /// assert_eq!(PrintArg::new(&"hi").text(), "hi");
    /// ```
    #[inline(always)]
    pub fn new<T: DevicePrint + ?Sized>(v: &'a T) -> Self {
        v.print_arg()
    }

    /// An argument of `kind` with `bits` (for [`DevicePrint`] impls of
    /// numeric-like types).
    #[inline(always)]
    pub const fn from_bits(kind: PrintKind, width: u8, bits: u64) -> Self {
        PrintArg {
            kind,
            width,
            bits,
            text: "",
        }
    }

    /// A string argument (for [`DevicePrint`] impls of text-like types).
    #[inline(always)]
    pub const fn from_str(text: &'a str) -> Self {
        PrintArg {
            kind: PrintKind::Str,
            width: 0,
            bits: 0,
            text,
        }
    }

    /// The kind.
    pub fn kind(&self) -> PrintKind {
        self.kind
    }

    /// The text of a `str` argument (empty for the others).
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The two words that cross for this argument when `sent` of its text
    /// bytes are sent: `kind | width << 8 | sent << 16`, then the bits.
    pub fn words(&self, sent: usize) -> [u64; 2] {
        [
            self.kind as u64 | (self.width as u64) << 8 | (sent as u64) << 16,
            self.bits,
        ]
    }
}

/// Values [`gpu_println!`](crate::gpu_println) can send to be formatted on
/// the host: integers, floats, `bool`, `char`, `str` (and `String` on the
/// host), [`IoError`], and references to them. Implement it for a type of
/// yours by mapping it to one of those with [`PrintArg::from_bits`] or
/// [`PrintArg::from_str`].
///
/// ```
/// use gpu_rpc::services::{DevicePrint, PrintArg, PrintKind};
/// struct Celsius(f32);
/// impl DevicePrint for Celsius {
///     fn print_arg(&self) -> PrintArg<'_> {
///         PrintArg::from_bits(PrintKind::F32, 4, self.0.to_bits() as u64)
///     }
/// }
/// assert_eq!(PrintArg::new(&Celsius(1.5)).kind(), PrintKind::F32);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be sent to the host to be formatted by gpu_println!",
    note = "gpu_println! formats on the host: it sends integers, floats, bool, char and str (see DevicePrint)",
    note = "implement gpu_rpc::services::DevicePrint for it, or format on the device with \
            gpu_rpc::services::print_fmt(fd, format_args!(..), newline) (core::fmt: costs registers)"
)]
pub trait DevicePrint {
    /// The value as a print argument.
    fn print_arg(&self) -> PrintArg<'_>;
}

macro_rules! print_ints {
    ($kind:ident, $via:ty: $($t:ty),*) => {$(
        impl DevicePrint for $t {
            #[inline(always)]
            fn print_arg(&self) -> PrintArg<'_> {
                PrintArg::from_bits(PrintKind::$kind, core::mem::size_of::<$t>() as u8, *self as $via as u64)
            }
        }
    )*};
}
print_ints!(Unsigned, u64: u8, u16, u32, u64, usize);
print_ints!(Signed, i64: i8, i16, i32, i64, isize);

impl DevicePrint for f32 {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_bits(PrintKind::F32, 4, self.to_bits() as u64)
    }
}
impl DevicePrint for f64 {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_bits(PrintKind::F64, 8, self.to_bits())
    }
}
impl DevicePrint for bool {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_bits(PrintKind::Bool, 1, *self as u64)
    }
}
impl DevicePrint for char {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_bits(PrintKind::Char, 4, *self as u64)
    }
}
impl DevicePrint for str {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_str(self)
    }
}
#[cfg(feature = "std")]
impl DevicePrint for std::string::String {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_str(self)
    }
}
impl DevicePrint for IoError {
    /// Printed as its `Display` (`ENOENT: no such file or directory`).
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        PrintArg::from_bits(PrintKind::IoError, 4, self.errno as i64 as u64)
    }
}
impl<T: DevicePrint + ?Sized> DevicePrint for &T {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        (**self).print_arg()
    }
}
impl<T: DevicePrint + ?Sized> DevicePrint for &mut T {
    #[inline(always)]
    fn print_arg(&self) -> PrintArg<'_> {
        (**self).print_arg()
    }
}

/// Bit of [`Std::print`](super::Std::print)'s `flags`: end the line with `'\n'`.
pub const PRINT_NEWLINE: u32 = 1;
/// Bit of [`Std::print`](super::Std::print)'s `flags`: the device cut its text arguments (they
/// exceeded [`LINE_MAX`] bytes together); the host marks the line truncated.
pub const PRINT_TEXT_CUT: u32 = 2;

/// Send one print: `format` (normalized by the macro) and `args` to the
/// host's `stream`, formatted there; what the print macros expand to. At
/// most [`LINE_MAX`] bytes of text arguments are sent (all of them together),
/// and the host cuts the line at [`LINE_MAX`] bytes as
/// [`gpu_println!`](crate::gpu_println) documents.
///
/// The host's [`IoError`] (a failing sink) is ignored; a failed call (no
/// client bound, the host does not serve [`Std`](super::Std)) panics.
#[inline(never)]
pub fn print_host(stream: Fd, newline: bool, format: &'static str, args: &[PrintArg<'_>]) {
    let args = match args.get(..MAX_PRINT_ARGS) {
        Some(a) => a,
        None => args,
    };
    let mut words = [0u64; 2 * MAX_PRINT_ARGS];
    let mut flags = if newline { PRINT_NEWLINE } else { 0 };
    let texts = args.iter().filter(|a| a.kind == PrintKind::Str).count();
    if texts <= 1 {
        // Zero or one text argument: it is sent as it is, no copy.
        let mut text: &[u8] = &[];
        for (a, w) in args.iter().zip(words.chunks_exact_mut(2)) {
            let mut sent = 0;
            if a.kind == PrintKind::Str {
                text = a.text.as_bytes();
                if text.len() > LINE_MAX {
                    text = text.get(..LINE_MAX).unwrap_or(text);
                    flags |= PRINT_TEXT_CUT;
                }
                sent = text.len();
            }
            w.copy_from_slice(&a.words(sent));
        }
        send(stream, flags, format, words.get(..2 * args.len()).unwrap_or(&[]), text);
        return;
    }
    // Several: packed back to back into one stack buffer.
    let mut buf = [0u8; LINE_MAX];
    let mut used = 0;
    for (a, w) in args.iter().zip(words.chunks_exact_mut(2)) {
        let mut sent = 0;
        if a.kind == PrintKind::Str {
            let room = &mut buf[used..];
            let src = a.text.as_bytes();
            sent = src.len().min(room.len());
            if sent < src.len() {
                flags |= PRINT_TEXT_CUT;
            }
            for (d, s) in room.iter_mut().zip(src) {
                *d = *s;
            }
            used += sent;
        }
        w.copy_from_slice(&a.words(sent));
    }
    send(
        stream,
        flags,
        format,
        words.get(..2 * args.len()).unwrap_or(&[]),
        &buf[..used],
    );
}

#[inline(always)]
fn send(stream: Fd, flags: u32, format: &str, words: &[u64], text: &[u8]) {
    let _ = with_std(|s| s.print(stream, flags, format, words, text));
}

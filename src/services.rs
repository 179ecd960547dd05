//! The standard services: device `println!`, panics reported on the host,
//! files, time and environment variables.
//!
//! A ready-made service, [`Std`], written with this crate's own
//! [`#[gpu_rpc]`](macro@crate::gpu_rpc) like any user trait, so it is served
//! beside the user's traits on one [`Dispatcher`](crate::server::Dispatcher)
//! (`Dispatcher::add(StdServer(host))`). It has two halves:
//!
//! * **Device side** (`no_std`, no allocation; compiles for
//!   `nvptx64-nvidia-cuda`, `amdgcn-amd-amdhsa` and the host): [`init`] stores
//!   the kernel's [`ClientDesc`] in static atomics so the macros
//!   [`gpu_print!`](crate::gpu_print), [`gpu_println!`](crate::gpu_println),
//!   [`gpu_eprint!`](crate::gpu_eprint) and
//!   [`gpu_eprintln!`](crate::gpu_eprintln) and the functions of this module
//!   ([`exit`], [`abort`], [`open`], [`read`], [`write_fd`], [`close`],
//!   [`time_ns`], [`getenv`], ...) reach the host without passing a client
//!   around. [`gpu_panic_handler!`](crate::gpu_panic_handler) defines a
//!   `#[panic_handler]` that reports the panic to the host, then traps.
//! * **Host side** (feature `std`): [`StdHost`], configured by
//!   [`StdHostConfig`]: output sinks, what `exit` does ([`ExitMode`]), file
//!   access ([`FileAccess`]), the `getenv` allowlist; afterwards it answers
//!   [`exit_code`](StdHost::exit_code) and [`panics`](StdHost::panics).
//!
//! # Example (CPU backend)
//!
//! On the CPU backend each client thread binds its client with
//! [`with_client`] (a GPU kernel calls [`init`] instead):
//!
//! ```
//! use gpu_rpc::cpu::{self, Launch};
//! use gpu_rpc::gpu_println;
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//! use gpu_rpc::services::{self, ExitMode, StdHost, StdHostConfig, StdServer};
//!
//! let (config, stdout, _stderr) = StdHostConfig::default().exit_mode(ExitMode::Record).capture();
//! let host = StdHost::new(config);
//! let mut d = Dispatcher::new(ServerConfig::default());
//! d.add(StdServer(host.clone())).unwrap();
//!
//! let report = cpu::launch(&Launch { threads: 4, ..Launch::default() }, &d, |client, t| {
//!     services::with_client(client, || {
//!         gpu_println!("hello from thread {} of {}", t.id, t.count);
//!         if t.id == 0 {
//!             services::exit(3);
//!         }
//!     })
//! })
//! .unwrap();
//!
//! assert_eq!(host.exit_code(), Some(3));
//! assert_eq!(report.halted, 1);
//! let mut lines = stdout.lines();
//! lines.sort();
//! assert_eq!(lines, ["hello from thread 0 of 4", "hello from thread 1 of 4",
//!                    "hello from thread 2 of 4", "hello from thread 3 of 4"]);
//! ```
//!
//! # Opcodes
//!
//! [`Std`]'s methods have explicit opcodes in the block [`OPCODE_BLOCK`]
//! (`0x1_0000..0x1_0100`), so they are stable across versions and builds.
//! User traits must not use explicit opcodes in that block (hashed opcodes
//! never fall in it).
//!
//! | opcode     | method                       |
//! |------------|------------------------------|
//! | `0x1_0000` | [`Std::write`]               |
//! | `0x1_0001` | [`Std::flush`]               |
//! | `0x1_0002` | [`Std::exit`]                |
//! | `0x1_0003` | [`Std::abort`]               |
//! | `0x1_0004` | [`Std::report_panic`]        |
//! | `0x1_0005` | [`Std::print`]               |
//! | `0x1_0010` | [`Std::open`]                |
//! | `0x1_0011` | [`Std::read`]                |
//! | `0x1_0012` | [`Std::write_fd`]            |
//! | `0x1_0013` | [`Std::close`]               |
//! | `0x1_0020` | [`Std::time_ns`]             |
//! | `0x1_0030` | [`Std::getenv`]              |
//!
//! # Printing
//!
//! The print macros format **on the host**. At compile time the macro checks
//! the format string (Rust's syntax: positional, named and captured
//! arguments, fill, alignment, sign, `#`, `0`, width, precision, and the
//! types none, `?`, `x`, `X`, `o`, `b`, `e`, `E`, `x?`, `X?`; widths and
//! precisions given at run time with `$` or `*` are refused) and normalizes
//! it. At run time the device packs each value into two words (integers,
//! floats, `bool`, `char`, `str`, [`IoError`]: see [`DevicePrint`]) and makes
//! **one** [`Std::print`] call; the host formats the line with `std`'s own
//! formatting (so `{}` of an `f32` prints exactly what `println!` prints) and
//! writes it to its sink in one piece: a line is never interleaved with
//! another lane's. No `core::fmt` runs on the device, which keeps a print's
//! register cost small (README "Device footprint"). The server runs a warp's
//! lanes in lane order within one call, so the lines a warp prints together
//! arrive in lane order; lines of different warps arrive in whatever order
//! the server finds them. A line longer than [`LINE_MAX`] (512) bytes,
//! newline included, is cut at a character boundary and ends with
//! [`TRUNCATION_MARKER`] (`"…[truncated]"`).
//!
//! To print a type of your own, implement [`DevicePrint`] for it, or format
//! it on the device with [`print_fmt`] (`core::fmt`, into a [`LINE_MAX`]-byte
//! buffer on the lane's stack: every kernel that can reach it pays
//! `core::fmt`'s registers).
//!
//! Each print is a synchronous call: when the macro returns the host has
//! written the line, so a later [`exit`] cannot overtake it.
//!
//! # Stack
//!
//! Formatting on the device ([`print_fmt`], `gpu_panic_handler!(format)`)
//! uses the thread's stack: its [`LINE_MAX`]-byte buffer plus `core::fmt`'s
//! frames, the panic handler a [`PANIC_MESSAGE_MAX`]-byte buffer plus the
//! panic machinery's. A print macro needs at most a [`LINE_MAX`]-byte buffer
//! (only when it sends several strings). Measured on
//! an H200 (sm_90, release build): a simple `gpu_println!` fits CUDA's
//! default per-thread stack of 1 KiB, the demo kernels' prints (with `{:?}`
//! of the arguments) need up to 1.5 KiB, and the panic handler up to 2 KiB.
//! Past the limit the launch fails with `CUDA_ERROR_ILLEGAL_ADDRESS`, so a
//! host running kernels that use these services should raise the limit
//! (`cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096)` or more) before launching.
//!
//! # Errors
//!
//! Host-side failures (a missing file, a bad fd, a sink that fails) are
//! values of type [`IoError`] the device can match on; nothing hangs. A failed
//! *call* (no client bound, a host that does not serve [`Std`]) makes the
//! functions of this module and the macros panic, as `println!` does when it
//! cannot write: on a GPU, the panic handler traps.

use core::fmt;

#[cfg(doc)]
use crate::protocol::ClientDesc;
use crate::{gpu_rpc, Wire};

mod args;
mod client;
mod fmt_buf;
#[cfg(feature = "std")]
mod format;
#[cfg(feature = "std")]
mod host;
mod io;
mod panic;
#[cfg(feature = "std")]
mod preallocate;
mod print;
#[cfg(feature = "std")]
mod sandbox;
#[cfg(feature = "std")]
mod sink;
pub use args::{args, str_from_ptr, Args};
#[cfg(feature = "std")]
pub use client::with_client;
pub use client::{init, stored_desc, try_with_std, with_std};
pub use fmt_buf::{format_line, print_fmt, FmtBuf};
#[cfg(feature = "std")]
pub use host::{Capture, DevicePanic, ExitHook, ExitMode, FileAccess, StdHost, StdHostConfig, MAX_RECORDED_PANICS};
pub use io::{abort, close, exit, flush, getenv, open, read, time_ns, write, write_fd};
pub use panic::{
    format_panic_message, report_panic, report_panic_info, report_panic_info_formatted, PanicReportError,
    FORMATTED_MESSAGE_OMITTED,
};
pub use print::{print_host, DevicePrint, PrintArg, PrintKind, MAX_PRINT_ARGS, PRINT_NEWLINE, PRINT_TEXT_CUT};

/// The opcodes reserved for [`Std`]: `0x1_0000..0x1_0100`.
///
/// ```
/// use gpu_rpc::services::{StdRpc, OPCODE_BLOCK};
/// assert!(StdRpc::OPCODES.iter().all(|op| OPCODE_BLOCK.contains(op)));
/// ```
pub const OPCODE_BLOCK: core::ops::Range<u32> = 0x1_0000..0x1_0100;

/// The most bytes one print sends (text, [`TRUNCATION_MARKER`] and newline).
pub const LINE_MAX: usize = 512;

/// What ends a line (or message) cut to fit its buffer.
pub const TRUNCATION_MARKER: &str = "…[truncated]";

/// The most bytes of a panic message the panic handler sends (longer ones
/// end with [`TRUNCATION_MARKER`]).
pub const PANIC_MESSAGE_MAX: usize = 512;

/// A host file descriptor as the device sees it: a small integer.
///
/// `Fd::STDOUT` (1) and `Fd::STDERR` (2) are the host's output sinks; files
/// opened with [`open`] get the lowest free number from 3 up. There is no
/// stdin: reading fd 0 gives [`IoError::EBADF`].
///
/// ```
/// use gpu_rpc::services::Fd;
/// assert_eq!(Fd::STDERR, Fd(2));
/// ```
#[derive(Wire, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(C)]
pub struct Fd(pub u32);

impl Fd {
    /// The host's standard output sink.
    pub const STDOUT: Fd = Fd(1);
    /// The host's standard error sink.
    pub const STDERR: Fd = Fd(2);
}

/// A host I/O error, as an `errno` value (Linux numbering) the device can
/// match on.
///
/// ```
/// use gpu_rpc::services::IoError;
/// let e = IoError::ENOENT;
/// assert!(e.is_not_found());
/// assert_eq!(e.name(), Some("ENOENT"));
/// assert_eq!(e.to_string(), "ENOENT: no such file or directory");
/// assert_eq!(IoError::new(1234).to_string(), "errno 1234");
/// ```
#[derive(Wire, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct IoError {
    /// The `errno` value.
    pub errno: i32,
}

macro_rules! errnos {
    ($($name:ident = $v:literal, $desc:literal;)*) => {
        impl IoError {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($v), "): ", $desc, ".")]
                pub const $name: IoError = IoError { errno: $v };
            )*

            /// The symbolic name of a known `errno` (`"ENOENT"`).
            pub const fn name(self) -> Option<&'static str> {
                match self.errno {
                    $($v => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// A short description of a known `errno`.
            pub const fn description(self) -> Option<&'static str> {
                match self.errno {
                    $($v => Some($desc),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "operation not permitted";
    ENOENT = 2, "no such file or directory";
    EIO = 5, "input/output error";
    EBADF = 9, "bad file descriptor";
    EAGAIN = 11, "resource temporarily unavailable";
    ENOMEM = 12, "out of memory";
    EACCES = 13, "permission denied";
    EEXIST = 17, "file exists";
    ENOTDIR = 20, "not a directory";
    EISDIR = 21, "is a directory";
    EINVAL = 22, "invalid argument";
    EMFILE = 24, "too many open files";
    EFBIG = 27, "file too large";
    ENOSPC = 28, "no space left on device";
    ESPIPE = 29, "illegal seek";
    EROFS = 30, "read-only file system";
    EPIPE = 32, "broken pipe";
    ENAMETOOLONG = 36, "file name too long";
    ENOSYS = 38, "function not implemented";
}

impl IoError {
    /// An error with this `errno`.
    pub const fn new(errno: i32) -> IoError {
        IoError { errno }
    }

    /// `ENOENT`: the file does not exist.
    pub const fn is_not_found(self) -> bool {
        self.errno == Self::ENOENT.errno
    }

    /// `EACCES` or `EPERM`: not allowed (by the host's OS or its
    /// [`FileAccess`](StdHostConfig) policy).
    pub const fn is_permission_denied(self) -> bool {
        self.errno == Self::EACCES.errno || self.errno == Self::EPERM.errno
    }

    /// `EBADF`: the fd is not open (or not open for this direction).
    pub const fn is_bad_fd(self) -> bool {
        self.errno == Self::EBADF.errno
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name(), self.description()) {
            (Some(n), Some(d)) => write!(f, "{n}: {d}"),
            _ => write!(f, "errno {}", self.errno),
        }
    }
}

/// Flags of [`open`] (combine with `|`).
///
/// ```
/// use gpu_rpc::services::flags;
/// let f = flags::WRITE | flags::CREATE | flags::TRUNCATE;
/// assert_eq!(f & flags::READ, 0);
/// ```
pub mod flags {
    /// Open for reading.
    pub const READ: u32 = 1;
    /// Open for writing.
    pub const WRITE: u32 = 2;
    /// Create the file if it does not exist (needs `WRITE` or `APPEND`).
    pub const CREATE: u32 = 4;
    /// Truncate the file to length 0 (needs `WRITE`).
    pub const TRUNCATE: u32 = 8;
    /// Write at the end of the file (implies `WRITE`).
    pub const APPEND: u32 = 16;
    /// Create the file, failing with `EEXIST` if it exists (needs `WRITE`).
    pub const CREATE_NEW: u32 = 32;
    /// Every known flag; others give `EINVAL`.
    pub const ALL: u32 = READ | WRITE | CREATE | TRUNCATE | APPEND | CREATE_NEW;
}

/// The standard services a kernel calls on the host.
///
/// Served by [`StdHost`] (`Dispatcher::add(StdServer(host))`); called by the
/// functions and macros of this module, or directly through [`StdClient`].
/// Every method has an explicit opcode in [`OPCODE_BLOCK`].
#[gpu_rpc(__standard_services)]
pub trait Std {
    /// Write `bytes` to the host's stdout ([`Fd::STDOUT`]) or stderr
    /// ([`Fd::STDERR`]) sink, all of them, in one piece (lines written by one
    /// call are never interleaved with others). Other fds give `EBADF`. The
    /// print macros make one such call per line.
    ///
    /// [`StdHost`] hands the lines of one warp's call to the sink together,
    /// in lane order, in one `write_all` under one lock, once the call's
    /// last lane has run and before the call returns (so one `write` system
    /// call per warp-call on a line-buffered stdout, and server threads do
    /// not queue on the sink's lock line by line). A lane writing to the
    /// other stream first hands on what the lanes before it wrote, so a
    /// terminal showing both streams shows them in lane order; a write of
    /// more than 4 KiB goes on its own, after the lines before it. A
    /// failing sink's error goes to the lane that handed the lines on (the
    /// call's last writer), and the lanes before it get `Ok`; lines handed
    /// on for another reason (the other stream's turn, or lanes after the
    /// last writer that failed before writing) keep their error for the
    /// sink's next write or flush.
    #[gpu_rpc(opcode = 0x1_0000)]
    fn write(&self, stream: Fd, bytes: &[u8]) -> Result<(), IoError>;

    /// Format a print on the host and write it like [`write`](Std::write):
    /// `format` is a format string normalized by the print macros (`{N:spec}`
    /// placeholders only), `args` two words per value ([`PrintArg::words`]),
    /// `text` the bytes of the `str` values back to back; `flags` holds
    /// [`PRINT_NEWLINE`] and [`PRINT_TEXT_CUT`]. The line is cut at
    /// [`LINE_MAX`] bytes as the macros document. `EINVAL` (nothing written)
    /// for a malformed string or values; `EBADF` for an fd other than
    /// stdout/stderr.
    #[gpu_rpc(opcode = 0x1_0005)]
    fn print(&self, stream: Fd, flags: u32, format: &str, args: &[u64], text: &[u8]) -> Result<(), IoError>;

    /// Flush the host's stdout or stderr sink (other fds give `EBADF`).
    #[gpu_rpc(opcode = 0x1_0001)]
    fn flush(&self, stream: Fd) -> Result<(), IoError>;

    /// End the program with `code`. [`ExitMode::Process`] flushes the sinks
    /// and exits the host process (as LLVM libc's GPU loader does);
    /// [`ExitMode::Record`] records the code (the first one wins) and ends the
    /// calling lane.
    #[gpu_rpc(opcode = 0x1_0002)]
    fn exit(&self, code: i32) -> !;

    /// Abort the program: [`ExitMode::Process`] flushes the sinks and aborts
    /// the host process; [`ExitMode::Record`] records it
    /// ([`StdHost::aborted`]) and ends the calling lane.
    #[gpu_rpc(opcode = 0x1_0003)]
    fn abort(&self) -> !;

    /// Report a device panic: `msg` (already formatted on the device, at most
    /// [`PANIC_MESSAGE_MAX`] bytes from the panic handler), its location and
    /// the panicking thread's block and thread ids. The host records it
    /// ([`StdHost::panics`]) and prints it to its stderr sink; the call
    /// returns, and the device's panic handler then traps.
    #[gpu_rpc(opcode = 0x1_0004)]
    fn report_panic(&self, msg: &str, file: &str, line: u32, column: u32, block: [u32; 3], thread: [u32; 3]);

    /// Open the host file at `path` with [`flags`]; returns its fd (the
    /// lowest free one from 3). Fails with `EACCES` when the host's
    /// [`FileAccess`] policy or its directories forbid it (the path must
    /// resolve beneath [`StdHostConfig::read_dirs`] or, to write,
    /// [`StdHostConfig::write_dirs`], without symlinks leaving them, to a
    /// regular file not on `/proc` or `/sys`), `EMFILE` past
    /// [`StdHostConfig::max_open_files`], `EINVAL` for unknown or
    /// contradictory flags, or the host OS's error (`ENOENT`, ...).
    #[gpu_rpc(opcode = 0x1_0010)]
    fn open(&self, path: &str, flags: u32) -> Result<Fd, IoError>;

    /// Read from `fd` into `buf` (an out-buffer: its contents come back to the
    /// device). Reads until `buf` is full or the end of the file; returns the
    /// bytes read (0 at the end). `EBADF` for an fd that is not an open file
    /// (stdout/stderr included) or was opened without `READ`.
    #[gpu_rpc(opcode = 0x1_0011)]
    fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<u64, IoError>;

    /// Write all of `bytes` to `fd` (a file opened for writing, or
    /// stdout/stderr); returns the bytes written.
    #[gpu_rpc(opcode = 0x1_0012)]
    fn write_fd(&self, fd: Fd, bytes: &[u8]) -> Result<u64, IoError>;

    /// Close `fd` (flushing it); `EBADF` if it is not an open file.
    #[gpu_rpc(opcode = 0x1_0013)]
    fn close(&self, fd: Fd) -> Result<(), IoError>;

    /// The host's wall-clock time, in nanoseconds since the UNIX epoch.
    #[gpu_rpc(opcode = 0x1_0020)]
    fn time_ns(&self) -> u64;

    /// The value of the host environment variable `name`, if the host allows
    /// it ([`StdHostConfig::env_allowlist`], empty by default) and it is set:
    /// its full length in bytes, with its first `out.len()` bytes copied to
    /// `out`. A variable that is not allowed looks unset.
    #[gpu_rpc(opcode = 0x1_0030)]
    fn getenv(&self, name: &str, out: &mut [u8]) -> Option<u64>;
}

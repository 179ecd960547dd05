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
//! use gpu_rpc::cpu::{run, Launch};
//! use gpu_rpc::gpu_println;
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//! use gpu_rpc::services::{self, ExitMode, StdHost, StdHostConfig, StdServer};
//!
//! let (config, stdout, _stderr) = StdHostConfig::default().exit_mode(ExitMode::Record).capture();
//! let host = StdHost::new(config);
//! let mut d = Dispatcher::new(ServerConfig::default());
//! d.add(StdServer(host.clone())).unwrap();
//!
//! let report = run(&Launch { threads: 4, ..Launch::default() }, &d, |client, t| {
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
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::protocol::{Client, ClientDesc};
use crate::{gpu_rpc, CallError, Wire};

#[cfg(feature = "std")]
mod format;
#[cfg(feature = "std")]
mod host;
mod print;
#[cfg(feature = "std")]
mod sandbox;
#[cfg(feature = "std")]
pub use host::{Capture, DevicePanic, ExitHook, ExitMode, FileAccess, StdHost, StdHostConfig, MAX_RECORDED_PANICS};
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
    /// call are never interleaved with others). Other fds give `EBADF`; a
    /// failing sink gives its error. The print macros make one such call per
    /// line.
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

// ---------------------------------------------------------------------------
// The current client.

/// The descriptor stored by [`init`]; `SHARED == 0` means "none".
static SHARED: AtomicU64 = AtomicU64::new(0);
static LOCKS: AtomicU64 = AtomicU64::new(0);
static PORT_COUNT: AtomicU32 = AtomicU32::new(0);
static LANE_SIZE: AtomicU32 = AtomicU32::new(0);

/// Store the kernel's client descriptor so that the print macros and the
/// functions of this module can reach the host.
///
/// Every thread of a kernel calls it first, with the same value (the kernel
/// parameter): it is cheap (four atomic loads when the value is already
/// stored) and safe to call concurrently. One descriptor per program: a later
/// `init` with another descriptor replaces it for every thread.
///
/// ```no_run
/// use gpu_rpc::protocol::ClientDesc;
///
/// // In a kernel crate: `#[no_mangle] pub unsafe extern "ptx-kernel" fn my_kernel(..)`.
/// pub unsafe fn my_kernel(desc: ClientDesc) {
///     // SAFETY: the descriptor the host passed to this kernel.
///     unsafe { gpu_rpc::services::init(&desc) };
///     gpu_rpc::gpu_println!("hello");
/// }
/// ```
///
/// # Safety
/// `desc` must describe a live region and lock array for as long as the
/// kernel runs (the descriptor the host passed to the kernel does), and every
/// thread calling `init` concurrently must pass the same value.
pub unsafe fn init(desc: &ClientDesc) {
    // Relaxed everywhere: the descriptor's four words are plain values, each
    // thread reads what it (or, under the "same value" contract, another
    // thread) stored; no other memory is published through them. A thread
    // that finds any word different stores all of them, so after `init`
    // returns its own view is complete.
    let same = SHARED.load(Ordering::Relaxed) == desc.shared
        && LOCKS.load(Ordering::Relaxed) == desc.locks
        && PORT_COUNT.load(Ordering::Relaxed) == desc.port_count
        && LANE_SIZE.load(Ordering::Relaxed) == desc.lane_size;
    if !same {
        LOCKS.store(desc.locks, Ordering::Relaxed);
        PORT_COUNT.store(desc.port_count, Ordering::Relaxed);
        LANE_SIZE.store(desc.lane_size, Ordering::Relaxed);
        SHARED.store(desc.shared, Ordering::Relaxed);
    }
}

/// The descriptor stored by [`init`], if any.
///
/// ```
/// // Nothing stored yet in this doctest process.
/// assert_eq!(gpu_rpc::services::stored_desc(), None);
/// ```
pub fn stored_desc() -> Option<ClientDesc> {
    // Relaxed: see `init`.
    let shared = SHARED.load(Ordering::Relaxed);
    (shared != 0).then(|| ClientDesc {
        shared,
        locks: LOCKS.load(Ordering::Relaxed),
        port_count: PORT_COUNT.load(Ordering::Relaxed),
        lane_size: LANE_SIZE.load(Ordering::Relaxed),
    })
}

#[cfg(feature = "std")]
std::thread_local! {
    /// The client bound by `with_client` on this host thread (null: none).
    static BOUND: core::cell::Cell<*const Client<'static>> = const { core::cell::Cell::new(core::ptr::null()) };
}

/// Run `f` with `client` as this host thread's client for the print macros
/// and the functions of this module: what a CPU-backend "kernel" does instead
/// of [`init`] (whose descriptor cannot describe a CPU region). Nests; the
/// previous binding is restored when `f` returns or unwinds.
///
/// ```
/// use gpu_rpc::cpu::{run, Launch};
/// use gpu_rpc::server::{Dispatcher, ServerConfig};
/// use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
///
/// let (config, out, _) = StdHostConfig::default().capture();
/// let mut d = Dispatcher::new(ServerConfig::default());
/// d.add(StdServer(StdHost::new(config))).unwrap();
/// run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| {
///     services::with_client(client, || gpu_rpc::gpu_print!("{}+{}={}", 1, 2, 1 + 2));
/// })
/// .unwrap();
/// assert_eq!(out.text(), "1+2=3");
/// ```
#[cfg(feature = "std")]
pub fn with_client<R>(client: &Client<'_>, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Client<'static>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BOUND.with(|b| b.set(self.0));
        }
    }
    let erased = (client as *const Client<'_>).cast::<Client<'static>>();
    let _restore = Restore(BOUND.with(|b| b.replace(erased)));
    f()
}

/// Run `f` with the current client: the one bound by [`with_client`] on this
/// host thread, else the one [`init`] stored. `None` if there is neither.
fn with_current<R>(f: impl FnOnce(&Client<'_>) -> R) -> Option<R> {
    #[cfg(feature = "std")]
    {
        let bound = BOUND.with(|b| b.get());
        if !bound.is_null() {
            // SAFETY: `with_client` bound this pointer to a client that lives
            // until its guard unbinds it, which happens after this call (we
            // are inside `f` of `with_client` on the same thread). The
            // lifetime was erased; `f` cannot keep the reference (it is
            // higher-ranked over both lifetimes).
            return Some(f(unsafe { &*bound }));
        }
    }
    let desc = stored_desc()?;
    // SAFETY: `init`'s contract: the stored descriptor describes a live region
    // and lock array for as long as the kernel runs. `try_from_desc`, not
    // `from_desc`: this path must not panic (the panic handler takes it).
    let client = unsafe { Client::try_from_desc(&desc) }?;
    Some(f(&client))
}

/// Run `f` with a [`StdClient`] over the current client, or return `None` if
/// no client is bound ([`init`], [`with_client`]).
///
/// ```
/// assert!(gpu_rpc::services::try_with_std(|s| s.time_ns()).is_none());
/// ```
pub fn try_with_std<R>(f: impl FnOnce(StdClient<'_, '_>) -> R) -> Option<R> {
    with_current(|c| f(StdClient::new(c)))
}

/// Run `f` with a [`StdClient`] over the current client; panics if none is
/// bound ([`init`], [`with_client`]).
///
/// ```should_panic
/// gpu_rpc::services::with_std(|s| s.time_ns()); // no client bound here
/// ```
pub fn with_std<R>(f: impl FnOnce(StdClient<'_, '_>) -> R) -> R {
    match try_with_std(f) {
        Some(r) => r,
        None => no_client(),
    }
}

#[cold]
#[inline(never)]
fn no_client() -> ! {
    panic!("gpu_rpc::services: no client (call gpu_rpc::services::init(&desc) in the kernel, or with_client on the CPU backend)")
}

// ---------------------------------------------------------------------------
// Bounded formatting.

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
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, Fd, StdHost, StdHostConfig, StdServer};
/// # let (config, out, _) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
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
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, out, _) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
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
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, out, _) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
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
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, _, err) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
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
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, StdHost, StdHostConfig, StdServer};
/// # let (config, _, err) = StdHostConfig::default().capture();
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(config))).unwrap();
/// # run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
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

// ---------------------------------------------------------------------------
// Device functions.

/// Write `bytes` to stdout or stderr on the host in one call ([`Std::write`]).
/// Panics if the call fails.
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// assert_eq!(services::write(Fd::STDOUT, b"raw bytes\n"), Ok(()));
/// assert_eq!(services::write(Fd(7), b"x"), Err(IoError::EBADF));
/// assert_eq!(services::flush(Fd::STDOUT), Ok(()));
/// # })).unwrap();
/// # assert_eq!(out.text(), "raw bytes\n");
/// ```
pub fn write(stream: Fd, bytes: &[u8]) -> Result<(), IoError> {
    with_std(|s| s.write(stream, bytes))
}

/// Flush the host's stdout or stderr sink ([`Std::flush`]).
pub fn flush(stream: Fd) -> Result<(), IoError> {
    with_std(|s| s.flush(stream))
}

/// End the program with `code` ([`Std::exit`]): the host exits (or records
/// the code) and this lane halts. Panics (traps on a GPU) if no client is
/// bound or the call fails.
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// services::exit(3); // ExitMode::Record here: the host records 3, the lane halts
/// # })).unwrap();
/// # assert_eq!((host.exit_code(), report.halted), (Some(3), 1));
/// ```
pub fn exit(code: i32) -> ! {
    let _: Option<()> = try_with_std(|s| s.exit(code));
    no_client()
}

/// Abort the program ([`Std::abort`]); this lane halts.
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// services::abort();
/// # })).unwrap();
/// # assert!(host.aborted());
/// ```
pub fn abort() -> ! {
    let _: Option<()> = try_with_std(|s| s.abort());
    no_client()
}

/// Open a host file ([`Std::open`]) with [`flags`]: only a regular file
/// beneath the directories the host allows (by default the host's working
/// directory, read-only; relative paths start there), else `EACCES`.
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, IoError, StdHost, StdHostConfig, StdServer};
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(StdHost::new(StdHostConfig::default()))).unwrap();
/// # run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// assert_eq!(services::open("no/such/file", flags::READ), Err(IoError::ENOENT));
/// assert_eq!(services::open("/etc/passwd", flags::READ), Err(IoError::EACCES)); // outside
/// # })).unwrap();
/// ```
pub fn open(path: &str, flags: u32) -> Result<Fd, IoError> {
    with_std(|s| s.open(path, flags))
}

/// Read from `fd` into `buf` until it is full or the file ends
/// ([`Std::read`]); returns the bytes read (0 at the end).
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_write(std::env::temp_dir()).capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// # let tmp = std::env::temp_dir().join(format!("gpu_rpc_doc_read_{}", std::process::id()));
/// # let path = tmp.to_str().unwrap();
/// let fd = services::open(path, flags::WRITE | flags::CREATE | flags::TRUNCATE).unwrap();
/// assert_eq!(services::write_fd(fd, b"first\nsecond\n"), Ok(13));
/// services::close(fd).unwrap();
///
/// let fd = services::open(path, flags::READ).unwrap();
/// let mut buf = [0u8; 8];
/// assert_eq!(services::read(fd, &mut buf), Ok(8));
/// assert_eq!(&buf, b"first\nse");
/// assert_eq!(services::read(fd, &mut buf), Ok(5));
/// assert_eq!(services::read(fd, &mut buf), Ok(0)); // end of file
/// services::close(fd).unwrap();
/// assert_eq!(services::close(fd), Err(IoError::EBADF));
/// # std::fs::remove_file(&tmp).unwrap();
/// # })).unwrap();
/// ```
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, IoError> {
    with_std(|s| s.read(fd, buf)).map(|n| n as usize)
}

/// Write all of `bytes` to `fd` ([`Std::write_fd`]); returns the bytes
/// written.
pub fn write_fd(fd: Fd, bytes: &[u8]) -> Result<usize, IoError> {
    with_std(|s| s.write_fd(fd, bytes)).map(|n| n as usize)
}

/// Close `fd` ([`Std::close`]).
pub fn close(fd: Fd) -> Result<(), IoError> {
    with_std(|s| s.close(fd))
}

/// The host's wall-clock time in nanoseconds since the UNIX epoch
/// ([`Std::time_ns`]).
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// let t = services::time_ns();
/// assert!(t > 1_600_000_000 * 1_000_000_000); // after 2020
/// # })).unwrap();
/// ```
pub fn time_ns() -> u64 {
    with_std(|s| s.time_ns())
}

/// The host environment variable `name`, if the host's allowlist has it and
/// it is set ([`Std::getenv`]): its first `buf.len()` bytes are copied to
/// `buf` and its full length returned (longer than `buf` means it was cut).
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// let mut buf = [0u8; 256];
/// // The host allows HOME here; everything else looks unset.
/// if let Some(n) = services::getenv("HOME", &mut buf) {
///     let home = core::str::from_utf8(&buf[..n.min(buf.len())]).unwrap_or("?");
///     gpu_rpc::gpu_println!("HOME={home}");
/// }
/// assert_eq!(services::getenv("PATH", &mut buf), None);
/// # })).unwrap();
/// ```
pub fn getenv(name: &str, buf: &mut [u8]) -> Option<usize> {
    with_std(|s| s.getenv(name, buf)).map(|n| n as usize)
}

/// Format `message` into a [`PANIC_MESSAGE_MAX`]-byte buffer (with
/// [`TRUNCATION_MARKER`] if cut): the message the panic handler sends.
///
/// ```
/// use gpu_rpc::services::{format_panic_message, FmtBuf};
/// let mut buf = FmtBuf::new();
/// let i = 7;
/// assert_eq!(format_panic_message(&mut buf, format_args!("index {i} out of bounds")), "index 7 out of bounds");
/// ```
pub fn format_panic_message(buf: &mut FmtBuf<PANIC_MESSAGE_MAX>, message: impl fmt::Display) -> &str {
    use fmt::Write as _;
    buf.clear();
    let _ = write!(buf, "{message}");
    buf.finish(false)
}

/// Report a panic to the host ([`Std::report_panic`]): `message` is
/// formatted on the device with [`format_panic_message`]. What the panic
/// handler of [`gpu_panic_handler!`](crate::gpu_panic_handler) calls; usable
/// directly (e.g. on the CPU backend, where the panic handler is std's).
///
/// Returns an error instead of panicking (a panic handler must not panic):
/// no client bound, or the call failed; see [`PanicReportError`].
///
/// ```
/// # use gpu_rpc::cpu::{run, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = run(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
/// let i = 7;
/// services::report_panic(format_args!("bad index {i}"), "src/lib.rs", 10, 5, [0, 0, 0], [3, 0, 0]).unwrap();
/// # })).unwrap();
/// # assert_eq!(host.panics()[0].to_string(),
/// #     "kernel panicked at src/lib.rs:10:5 (block (0,0,0), thread (3,0,0)): bad index 7");
/// assert!(matches!(
///     services::report_panic("no client here", "f.rs", 1, 1, [0; 3], [0; 3]),
///     Err(services::PanicReportError::NoClient)
/// ));
/// ```
pub fn report_panic(
    message: impl fmt::Display,
    file: &str,
    line: u32,
    column: u32,
    block: [u32; 3],
    thread: [u32; 3],
) -> Result<(), PanicReportError> {
    let mut buf = FmtBuf::<PANIC_MESSAGE_MAX>::new();
    let msg = format_panic_message(&mut buf, message);
    match try_with_std(|s| s.try_report_panic(msg, file, line, column, block, thread)) {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(PanicReportError::Call(e)),
        None => Err(PanicReportError::NoClient),
    }
}

/// Why [`report_panic`] could not reach the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanicReportError {
    /// No client is bound ([`init`] was not called).
    NoClient,
    /// The call failed (e.g. the host does not serve [`Std`]).
    Call(CallError),
}

impl fmt::Display for PanicReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PanicReportError::NoClient => f.write_str("gpu_rpc::services: no client bound"),
            PanicReportError::Call(e) => e.fmt(f),
        }
    }
}

/// What the default panic handler reports for a panic whose message has
/// formatted arguments (`panic!("{x}")`, `expect`, bounds checks): formatting
/// them needs `core::fmt` on the device, whose register needs would lift every
/// kernel of the crate (see [`gpu_panic_handler!`](crate::gpu_panic_handler)).
pub const FORMATTED_MESSAGE_OMITTED: &str =
    "<formatted panic message not shown: use gpu_panic_handler!(format) to format it on the device>";

/// Report the panic `info` with this thread's `block` and `thread` ids to the
/// host, ignoring failures, **without `core::fmt`**: the body of the handler
/// that [`gpu_panic_handler!()`](crate::gpu_panic_handler) defines (which then
/// traps). A message without arguments (`panic!("literal")`, `unwrap` on
/// `None`, `assert!`, failed calls of generated stubs) is sent as it is, one
/// with arguments as [`FORMATTED_MESSAGE_OMITTED`]; the location is always
/// sent. A panic without a location is reported at `<unknown>:0:0`.
pub fn report_panic_info(info: &core::panic::PanicInfo<'_>, block: [u32; 3], thread: [u32; 3]) {
    let (file, line, column) = panic_location(info);
    let msg = info.message().as_str().unwrap_or(FORMATTED_MESSAGE_OMITTED);
    let _ = try_with_std(|s| s.try_report_panic(msg, file, line, column, block, thread));
}

/// [`report_panic_info`] with the message formatted on the device by
/// `core::fmt` (at most [`PANIC_MESSAGE_MAX`] bytes): the body of
/// [`gpu_panic_handler!(format)`](crate::gpu_panic_handler). Costs the
/// registers and stack of `core::fmt` in every kernel that can panic.
pub fn report_panic_info_formatted(info: &core::panic::PanicInfo<'_>, block: [u32; 3], thread: [u32; 3]) {
    let (file, line, column) = panic_location(info);
    let _ = report_panic(info.message(), file, line, column, block, thread);
}

fn panic_location<'i>(info: &'i core::panic::PanicInfo<'_>) -> (&'i str, u32, u32) {
    match info.location() {
        Some(l) => (l.file(), l.line(), l.column()),
        None => ("<unknown>", 0, 0),
    }
}

/// Define the kernel crate's `#[panic_handler]`: it reports the panic's
/// message and location with the block and thread ids to the host with
/// [`Std::report_panic`] (the host records and prints
/// `kernel panicked at src/lib.rs:10:5 (block (0,0,0), thread (3,0,0)): ...`),
/// then traps, so the kernel launch fails.
///
/// Invoke it once, at the root of a `no_std` kernel crate, instead of writing
/// a `#[panic_handler]`:
///
/// ```
/// // src/lib.rs of the kernel crate, under `#![no_std]` and
/// // `#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx))]`
/// // (on any other target the handler is not defined):
/// gpu_rpc::gpu_panic_handler!();
/// # fn main() {}
/// ```
///
/// # Two forms: the footprint of formatting
///
/// * `gpu_panic_handler!()` uses **no `core::fmt`** ([`report_panic_info`]):
///   messages without arguments (`panic!("literal")`, `unwrap()` on `None`,
///   `assert!(cond)`, a failed generated call) arrive whole, messages with
///   arguments as [`FORMATTED_MESSAGE_OMITTED`]; the file, line, column,
///   block and thread always arrive. A kernel that can panic pays a few
///   registers for it (measured with ptxas in CI: see README "Device
///   footprint").
/// * `gpu_panic_handler!(format)` formats every message on the device
///   ([`report_panic_info_formatted`], at most [`PANIC_MESSAGE_MAX`] bytes).
///   `core::fmt` reaches its formatters through function pointers, so ptxas
///   must give every kernel that can panic the registers of the hungriest
///   formatter in the crate: about 170 on sm_90, which limits blocks to 256
///   threads and costs occupancy. Use it while debugging.
///
/// * The handler exists only on GPU targets (`nvptx64`, `amdgpu`): a host
///   build of the same crate uses std's.
/// * On `nvptx64` it reads the block and thread ids and traps with
///   `core::arch::nvptx`, so the crate must enable
///   `#![feature(stdarch_nvptx)]` for `nvptx64` (kernel crates already enable
///   nightly features for `abi_ptx`).
/// * On `amdgpu` it uses `core::arch::amdgpu` (workgroup/workitem ids,
///   `s_sethalt 1` to stop the wavefront), so the crate must enable
///   `#![feature(stdarch_amdgpu)]` for `amdgpu`.
/// * If the kernel did not call [`init`], or the host does not serve
///   [`Std`], nothing is reported and the handler just traps.
#[macro_export]
macro_rules! gpu_panic_handler {
    () => {
        $crate::gpu_panic_handler!(@with report_panic_info);
    };
    (format) => {
        $crate::gpu_panic_handler!(@with report_panic_info_formatted);
    };
    (@with $report:ident) => {
        #[cfg(target_arch = "nvptx64")]
        #[panic_handler]
        fn __gpu_rpc_panic_handler(info: &$crate::__private::core::panic::PanicInfo<'_>) -> ! {
            use $crate::__private::core::arch::nvptx as __nv;
            // SAFETY: reading the block and thread id registers has no
            // preconditions.
            let (block, thread) = unsafe {
                (
                    [
                        __nv::_block_idx_x() as u32,
                        __nv::_block_idx_y() as u32,
                        __nv::_block_idx_z() as u32,
                    ],
                    [
                        __nv::_thread_idx_x() as u32,
                        __nv::_thread_idx_y() as u32,
                        __nv::_thread_idx_z() as u32,
                    ],
                )
            };
            $crate::services::$report(info, block, thread);
            // SAFETY: `trap` aborts the kernel; the launch reports an error.
            unsafe { __nv::trap() }
        }

        #[cfg(target_arch = "amdgpu")]
        #[panic_handler]
        fn __gpu_rpc_panic_handler(info: &$crate::__private::core::panic::PanicInfo<'_>) -> ! {
            use $crate::__private::core::arch::amdgpu as __amd;
            let block = [
                __amd::workgroup_id_x(),
                __amd::workgroup_id_y(),
                __amd::workgroup_id_z(),
            ];
            let thread = [
                __amd::workitem_id_x(),
                __amd::workitem_id_y(),
                __amd::workitem_id_z(),
            ];
            $crate::services::$report(info, block, thread);
            // `s_sethalt 1` stops the wavefront; the queue reports an error.
            __amd::s_sethalt::<1>()
        }
    };
}

/// The kernel's command-line arguments, as `gpu-run` passes them: `argv` is a
/// device pointer to `argc` device pointers to NUL-terminated strings.
///
/// Each argument is yielded as `&str`; one that is not valid UTF-8 is
/// yielded as its longest valid prefix.
///
/// ```
/// use std::ffi::CString;
/// let owned: Vec<CString> = ["prog", "-v", "héllo"].iter().map(|s| CString::new(*s).unwrap()).collect();
/// let ptrs: Vec<*const core::ffi::c_char> = owned.iter().map(|s| s.as_ptr()).collect();
/// // SAFETY: `ptrs` holds 3 pointers to NUL-terminated strings, all alive
/// // while the iterator is used.
/// let args = unsafe { gpu_rpc::services::args(3, ptrs.as_ptr() as u64) };
/// assert_eq!(args.len(), 3);
/// assert_eq!(args.collect::<Vec<_>>(), ["prog", "-v", "héllo"]);
/// ```
///
/// # Safety
/// `argv` must be null (with any `argc`: no arguments) or point to `argc`
/// readable pointers, each to a readable NUL-terminated string, all of them
/// alive and unchanged for as long as the yielded `&str`s are used (for the
/// arguments `gpu-run` passes: the whole kernel).
pub unsafe fn args(argc: u32, argv: u64) -> Args {
    Args {
        argv: argv as usize as *const *const core::ffi::c_char,
        next: 0,
        argc: if argv == 0 { 0 } else { argc },
    }
}

/// The NUL-terminated string at device address `ptr` (a kernel argument such
/// as a path), as `&str`: its longest valid UTF-8 prefix; `""` for a null
/// pointer.
///
/// ```
/// let s = c"data/input.txt";
/// // SAFETY: a NUL-terminated string that outlives the result's use.
/// assert_eq!(unsafe { gpu_rpc::services::str_from_ptr(s.as_ptr() as u64) }, "data/input.txt");
/// ```
///
/// # Safety
/// `ptr` must be null or point to a readable NUL-terminated string that stays
/// alive and unchanged for as long as the result is used.
pub unsafe fn str_from_ptr(ptr: u64) -> &'static str {
    if ptr == 0 {
        return "";
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { core::ffi::CStr::from_ptr(ptr as usize as *const core::ffi::c_char) }.to_bytes();
    match core::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

/// Iterator over the kernel's arguments; see [`args`]. Its `Debug` prints
/// them as a list: `["prog", "-v"]`.
#[derive(Clone)]
pub struct Args {
    argv: *const *const core::ffi::c_char,
    next: u32,
    argc: u32,
}

impl Iterator for Args {
    type Item = &'static str;

    fn next(&mut self) -> Option<&'static str> {
        if self.next >= self.argc {
            return None;
        }
        // SAFETY: `args`' contract: `argv` points to `argc` readable
        // pointers to NUL-terminated strings that stay alive and unchanged
        // while the `&str`s are used.
        let s = unsafe { str_from_ptr(*self.argv.add(self.next as usize) as usize as u64) };
        self.next += 1;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.argc - self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Args {}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

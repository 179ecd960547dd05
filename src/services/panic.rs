//! Panics reported on the host: [`report_panic`] and friends, and the
//! [`gpu_panic_handler!`](crate::gpu_panic_handler) macro that defines a
//! kernel crate's `#[panic_handler]`.

use core::fmt;

#[cfg(doc)]
use super::{init, Std, TRUNCATION_MARKER};
use super::{try_with_std, FmtBuf, PANIC_MESSAGE_MAX};
use crate::CallError;

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
/// # use gpu_rpc::cpu::{self, Launch};
/// # use gpu_rpc::server::{Dispatcher, ServerConfig};
/// # use gpu_rpc::services::{self, flags, ExitMode, Fd, IoError, StdHost, StdHostConfig, StdServer};
/// # let (config, out, err) = StdHostConfig::default().exit_mode(ExitMode::Record).allow_env("HOME").capture();
/// # let host = StdHost::new(config);
/// # let mut d = Dispatcher::new(ServerConfig::default());
/// # d.add(StdServer(host.clone())).unwrap();
/// # let report = cpu::launch(&Launch { threads: 1, ..Launch::default() }, &d, |client, _| services::with_client(client, || {
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

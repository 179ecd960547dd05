//! # gpu_rpc
//!
//! Typed host services for GPU kernels. A kernel calls methods of a Rust trait;
//! the calls travel over a shared-memory RPC protocol (modeled on LLVM libc's
//! GPU RPC) to a host server that runs the trait's host implementation.
//!
//! * [`#[gpu_rpc]`](macro@gpu_rpc) on a trait generates a device client stub
//!   (`no_std`, no allocation), a host server adapter, opcodes and per-method
//!   call descriptions.
//! * [`#[derive(Wire)]`](derive@Wire) makes a `#[repr(C)]` struct an argument
//!   or result type.
//! * The runtime modules ([`protocol`], [`call`], [`wire`], [`lanes`],
//!   [`cpp`], `server`, `cpu`) are re-exported from `rpc-runtime`.
//! * For CUDA C++ kernels, `<Trait>Rpc::cuda_header()` returns a header that
//!   declares a C++ client of the same trait ([`cpp`]).
//!
//! ## Features
//!
//! * `std` (default): the host side — `server`, and the server adapters
//!   `#[gpu_rpc]` generates. Without it (a device build) the macro generates
//!   only the client side, which is `no_std` and allocation-free.
//! * `cpu` (default, implies `std`): the CPU backend, [`cpu`], where client
//!   lanes are host threads, so everything runs without a GPU.
//! * `cuda`, `hsa`: the NVIDIA and AMD backends (their drivers are loaded at
//!   run time, so both build anywhere).
//! * `tracing`: a `tracing` span per served call and an event per server
//!   error.
//!
//! ## Example (CPU backend)
//!
//! ```
//! use gpu_rpc::cpu::{self, Launch};
//! use gpu_rpc::server::{Dispatcher, ServerConfig};
//! use gpu_rpc::gpu_rpc;
//!
//! #[gpu_rpc]
//! pub trait Math {
//!     fn add(&self, a: u64, b: u64) -> u64;
//!     fn sum(&self, items: &[u32]) -> u64;
//! }
//!
//! struct Host;
//! impl Math for Host {
//!     fn add(&self, a: u64, b: u64) -> u64 {
//!         a + b
//!     }
//!     fn sum(&self, items: &[u32]) -> u64 {
//!         items.iter().map(|&x| u64::from(x)).sum()
//!     }
//! }
//!
//! let mut d = Dispatcher::new(ServerConfig::default());
//! d.add(MathServer(Host)).unwrap();
//! let report = cpu::launch(&Launch { threads: 4, ..Launch::default() }, &d, |client, t| {
//!     let math = MathClient::new(client);
//!     assert_eq!(math.add(t.id as u64, 1), t.id as u64 + 1);
//!     assert_eq!(math.try_sum(&[1, 2, 3]), Ok(6));
//! })
//! .unwrap();
//! assert_eq!(report.calls, 8);
//! ```
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]

// `#[gpu_rpc]` and `#[derive(Wire)]` name `::gpu_rpc::...` paths; this lets
// them work inside this crate too (the `services` module uses them).
extern crate self as gpu_rpc;

#[doc(hidden)]
pub use rpc_macros::__print;
pub use rpc_macros::{gpu_rpc, Wire};
pub use rpc_runtime::*;

pub mod services;

/// What generated code needs; not a public API.
///
/// The one path the code `#[gpu_rpc]`, `#[derive(Wire)]` and the print macros
/// generate names: `::gpu_rpc::__private::*`, so the user's crate needs no
/// other dependency and the public modules can move without breaking
/// generated code. What is generated for the host side is wrapped in
/// [`if_std!`](crate::__gpu_rpc_if_std): that macro is defined by *this*
/// crate, according to *its* `std` feature, so the decision is made where the
/// feature is known. (A `#[cfg(feature = "std")]` in generated code would test
/// the user's crate's features instead.)
#[doc(hidden)]
pub mod __private {
    pub use crate::__gpu_rpc_if_std as if_std;
    pub use core;
    #[cfg(feature = "std")]
    pub use std::string::String;
    #[cfg(feature = "std")]
    pub use std::sync::Arc;
    #[cfg(feature = "std")]
    pub use std::vec::Vec;

    pub use crate::call::{
        direct_items, fail, halt, lengths_bytes, out_len_word, stream_len_word, Block, CallDesc, CallError,
    };
    pub use crate::cpp;
    pub use crate::protocol::Client;
    #[cfg(feature = "std")]
    pub use crate::server::{LaneError, MethodInfo, ServerCall, Service};
    pub use crate::services::{print_host, PrintArg};
    pub use crate::wire::{fnv1a, mix, Wire, WireError, SCHEMA_SEED};

    use crate::call::Status;

    /// `n` as a `u32`, saturating (so that an oversized layout still fails
    /// `CallDesc::check` instead of wrapping around).
    pub const fn bytes_u32(n: usize) -> u32 {
        if n > u32::MAX as usize {
            u32::MAX
        } else {
            n as u32
        }
    }

    /// Asserts (at compile time) that `size` (a `Wire::SIZE`) fits a slice or
    /// out-buffer element.
    pub const fn check_elem_size(size: usize) {
        assert!(
            size > 0 && size <= crate::protocol::BUFFER_BYTES,
            "gpu_rpc: elements of &[T] and &mut [T] arguments must encode to 1..=64 bytes"
        );
    }

    /// Write the length word `word` (from [`stream_len_word`] or
    /// [`out_len_word`]) as the `i`-th `u64` of an argument block.
    #[inline(always)]
    pub fn put_len(block: &mut [u8], i: usize, word: u64) {
        block[8 * i..8 * i + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// A reply's decoded return value; a value the host should never have
    /// sent (an invalid `bool`, `char`, ...) is reported as
    /// [`Status::BadFrame`].
    #[inline(always)]
    pub fn ret_value<R>(decoded: Result<R, WireError>, desc: &'static CallDesc) -> Result<R, CallError> {
        decoded.map_err(|_| CallError {
            status: Status::BadFrame,
            detail: 0,
            desc,
        })
    }

    /// Run the host implementation of a `-> !` method. If it ends by
    /// [`lanes::halt`](crate::lanes::halt) (the unwind payload
    /// [`Halt`](crate::lanes::Halt)), the call completed normally: the lane
    /// gets `Ok` and the device stub halts it. Other panics propagate to
    /// `ServerCall::run`, which answers `HandlerPanicked`.
    #[cfg(feature = "std")]
    pub fn diverge(f: impl FnOnce()) -> Result<(), crate::server::LaneError> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(()) => Ok(()),
            Err(p) if p.is::<crate::lanes::Halt>() => Ok(()),
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

/// Expands to its input when `gpu_rpc` has the `std` feature, to nothing
/// otherwise; generated host-side items are wrapped in it.
#[cfg(feature = "std")]
#[doc(hidden)]
#[macro_export]
macro_rules! __gpu_rpc_if_std {
    ($($t:tt)*) => { $($t)* };
}

/// Expands to its input when `gpu_rpc` has the `std` feature, to nothing
/// otherwise; generated host-side items are wrapped in it.
#[cfg(not(feature = "std"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __gpu_rpc_if_std {
    ($($t:tt)*) => {};
}

//! # rpc-runtime
//!
//! The runtime half of `gpu_rpc`: the shared-memory RPC protocol that lets GPU
//! kernels call host services, and the host backends that serve it.
//!
//! * [`protocol`] — the `no_std`, allocation-free protocol core: the shared
//!   memory [`Layout`], the client and server processes, and
//!   typestate [`Port`](protocol::Port)s. It compiles for the host, for
//!   `nvptx64-nvidia-cuda` and for `amdgcn-amd-amdhsa`.
//! * [`lanes`] — warp/wavefront operations (lane id, mask, ballot, broadcast,
//!   sync) for NVPTX (32 lanes), AMDGCN (64 lanes) and the host (one lane).
//! * [`wire`] — the [`Wire`] encoding of arguments and results:
//!   explicit little-endian bytes, identical on every target, validated on
//!   decode.
//! * [`format_spec`] — the format-spec grammar of host-formatted printing
//!   (`gpu_println!`), shared by the macro and the host.
//! * [`cpp`] — CUDA C++ kernels calling the same traits: how wire types are
//!   spelled in C++ and (feature `std`) the header `<Trait>Rpc::cuda_header()`
//!   returns, over a C++ client of the same protocol.
//! * [`call`] — the call frame that generated client stubs speak: arguments,
//!   streamed slices, out-buffers, per-lane status. `no_std`.
//! * [`device_memory`] — the direct copies of large slices between device
//!   memory and the host that a backend gives its server. `no_std`.
//! * `metrics` (feature `std`) — per-method counters and host-time
//!   histograms a `Dispatcher` keeps while serving.
//! * `server` (feature `std`) — the host server: port scanning, services,
//!   dispatch helpers for generated code, error reporting; with feature
//!   `tracing`, a span per served call and an event per error.
//! * `launch` (features `cuda`, `hsa`) — what the GPU backends share: kernel
//!   arguments, the report of a launch, mapped host buffers. The one
//!   launch-and-serve path all three backends run through is the private
//!   `host` module.
//! * `cuda` (feature `cuda`) and `hsa` (feature `hsa`) — the NVIDIA and AMD
//!   backends; their drivers are loaded at run time, so both build anywhere.
//! * `cpu` (feature `cpu`, default) — the CPU backend: client lanes are host
//!   threads, so everything runs on a machine without a GPU.
//!
//! Most users depend on the `gpu_rpc` facade crate and write a trait with
//! `#[gpu_rpc]`; this crate is what the generated code calls.
#![cfg_attr(not(feature = "std"), no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch, stdarch_nvptx))]
#![cfg_attr(target_arch = "amdgpu", feature(link_llvm_intrinsics), allow(internal_features))]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod call;
pub mod cpp;
pub mod device_memory;
pub mod format_spec;
pub mod lanes;
pub mod protocol;
mod sync;
pub mod wire;

#[cfg(feature = "std")]
mod host;
#[cfg(any(feature = "cuda", feature = "hsa"))]
pub mod launch;
#[cfg(feature = "std")]
pub mod metrics;
#[cfg(feature = "std")]
pub mod server;
#[cfg(feature = "std")]
mod spawn;

#[cfg(feature = "cpu")]
pub mod cpu;

#[cfg(feature = "cuda")]
pub mod cuda;

#[cfg(feature = "hsa")]
pub mod hsa;

pub use call::{assert_disjoint_opcodes, CallDesc, CallError, Status};
pub use protocol::{Client, Layout};
pub use wire::Wire;

//! Service traits shared by the example kernels (device) and host programs.
#![no_std]

use gpu_rpc::gpu_rpc;

pub mod bulk;
pub mod conform;
pub mod cpp_demo;
pub mod pingpong;

/// What the hello example's kernel asks of its host.
#[gpu_rpc]
pub trait HostServices {
    /// Print one line to the host's stderr.
    fn print_stderr(&self, msg: &str);
    /// End the run with `code`.
    fn exit(&self, code: i32) -> !;
    /// Add two numbers.
    fn add(&self, a: u64, b: u64) -> u64;
    /// Fill `out` from the host's data at `offset`; returns the bytes filled.
    fn read_block(&self, offset: u64, out: &mut [u8]) -> usize;
}

/// Calls the benchmarks and the GPU checks use.
#[gpu_rpc]
pub trait Bench {
    /// Round-trip increment.
    fn incr(&self, x: u64) -> u64;
    /// Stream `data` to the host; returns its length.
    fn sink(&self, data: &[u8]) -> u64;
    /// Print a line without waiting for the host.
    #[gpu_rpc(async)]
    fn log(&self, msg: &str);
}

/// The randomized conformance suite's service (issue 12; see [`conform`]):
/// one method per kind of argument and result. Every method takes the calling
/// lane's global thread id `gid` and its step number `step` first, so the
/// host can check each lane's calls, in order, against the [`conform::Model`].
/// The host returns the values the `conform::*_value` functions define.
#[gpu_rpc]
pub trait Conform {
    /// Scalars of several kinds; returns [`conform::mix_value`].
    #[allow(clippy::too_many_arguments)]
    fn mix(&self, gid: u32, step: u32, a: u64, b: i32, c: u8, d: bool, e: f64) -> (u64, f64);
    /// A struct argument and result; returns [`conform::record_value`].
    fn record(&self, gid: u32, step: u32, r: conform::Rec) -> conform::Rec;
    /// A streamed string; returns [`conform::text_value`].
    fn text(&self, gid: u32, step: u32, s: &str) -> u64;
    /// A streamed slice; returns [`conform::sum_value`].
    fn sum(&self, gid: u32, step: u32, v: &[u32]) -> u64;
    /// An out-buffer the host fills with [`conform::fill_word`]; returns
    /// [`conform::fill_value`].
    fn fill(&self, gid: u32, step: u32, key: u64, out: &mut [u64]) -> u32;
    /// A value the lanes of a group share when they make the call at the
    /// same point of their programs; returns [`conform::ack_value`], of `x`
    /// alone, so such lanes get one reply (inline in the server's outbox word
    /// when it fits in 30 bits, in the packet otherwise).
    fn ack(&self, gid: u32, step: u32, x: u32) -> u32;
    /// Fire-and-forget: the lane does not wait for the host.
    #[gpu_rpc(async)]
    fn note(&self, gid: u32, step: u32, v: u64, tag: &str);
    /// The lane's last call: the host records it, then the lane halts.
    fn finish(&self, gid: u32, step: u32) -> !;
}

// The host programs serve these traits together with the standard services:
// checked here, in the `no_std` crate both sides share, at compile time.
const _: () = gpu_rpc::assert_disjoint_opcodes(&[
    HostServicesRpc::OPCODES,
    BenchRpc::OPCODES,
    ConformRpc::OPCODES,
    cpp_demo::CppDemoRpc::OPCODES,
    bulk::BulkRpc::OPCODES,
    gpu_rpc::services::StdRpc::OPCODES,
]);

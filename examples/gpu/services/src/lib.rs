//! Service traits shared by the example kernels (device) and host programs.
#![no_std]

use gpu_rpc::gpu_rpc;

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

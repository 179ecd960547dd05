//! The service a CUDA C++ kernel calls (`examples/gpu/cpp/cpp_demo.cu`, through
//! `CppDemoRpc::cuda_header()`), and an older version of it whose header must
//! be refused with `SignatureMismatch`.

use gpu_rpc::{gpu_rpc, Wire};

/// A struct crossing both ways: a C++ struct of the same layout on the device.
#[derive(Wire, Clone, Copy, Debug, PartialEq, Default)]
#[repr(C)]
pub struct Sample {
    /// The calling thread.
    pub lane: u32,
    /// A value.
    pub value: f64,
    /// Three bytes.
    pub flags: [u8; 3],
    /// A flag.
    pub ok: bool,
}

/// What the C++ kernel calls: every kind of argument and result the C++
/// client offers.
#[gpu_rpc]
pub trait CppDemo {
    /// `x * factor`.
    fn scale(&self, x: u32, factor: i64) -> i64;
    /// The sample transformed (see the host).
    fn record(&self, s: Sample) -> Sample;
    /// A position-weighted sum of `data`.
    fn checksum(&self, data: &[u32]) -> u64;
    /// The number in `"lane <n>"`, or `u32::MAX`.
    fn greet(&self, name: &str) -> u32;
    /// `out[i] = seed + 7 i` (wrapping).
    fn fill(&self, seed: u32, out: &mut [u16]);
    /// How many samples are `ok`; `None` for none given.
    fn count_ok(&self, items: &[Sample]) -> Option<u32>;
    /// `x / 2` for even `x`, else `Err(-x)`.
    fn halve(&self, x: u32) -> Result<u32, i32>;
    /// Counted by the host; fire-and-forget.
    #[gpu_rpc(async)]
    fn note(&self, lane: u32);
    /// A tuple result: not offered in C++ (the header says so).
    fn pair(&self) -> (u32, u32);
}

/// The same trait as an older build had it: `scale` took an `i32`. Same
/// name, same opcode, another signature.
pub mod v0 {
    use gpu_rpc::gpu_rpc;

    /// See [`CppDemo`](super::CppDemo).
    #[gpu_rpc]
    pub trait CppDemo {
        /// `x * factor`, with a narrower factor.
        fn scale(&self, x: u32, factor: i32) -> i64;
    }
}

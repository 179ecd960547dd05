//! The bulk-data check's service: large slices both ways, every byte
//! compared against a pattern both sides compute ([`byte`], [`word`]).

use gpu_rpc::gpu_rpc;

/// Byte `i` of the pattern `seed`.
#[inline(always)]
pub fn byte(seed: u64, i: u64) -> u8 {
    (word(seed, i / 8) >> (8 * (i % 8))) as u8
}

/// Word `i` of the pattern `seed` (a mix of both, so that a slice shifted
/// or swapped with another lane's shows).
#[inline(always)]
pub fn word(seed: u64, i: u64) -> u64 {
    let x = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

/// Large slices in and out; every method counts or writes the pattern.
/// The methods that read or write every byte run a call's lanes on several
/// host threads (`#[gpu_rpc(parallel)]`); `check_halves` and `give_half`
/// keep the lanes in order on the serving thread, so the checks cover both.
#[gpu_rpc]
pub trait Bulk {
    /// How many bytes of `data` differ from [`byte`]`(seed, i)`.
    #[gpu_rpc(parallel)]
    fn check_bytes(&self, seed: u64, data: &[u8]) -> u64;
    /// How many elements of `data` differ from the low half of
    /// [`word`]`(seed, i)`.
    fn check_halves(&self, seed: u64, data: &[u32]) -> u64;
    /// Fill `out` with [`byte`]`(seed, i)`; returns its length.
    #[gpu_rpc(parallel)]
    fn give_bytes(&self, seed: u64, out: &mut [u8]) -> u64;
    /// Fill `out` with [`word`]`(seed, i)`; returns its length.
    #[gpu_rpc(parallel)]
    fn give_words(&self, seed: u64, out: &mut [u64]) -> u64;
    /// Fill `out` with ones (the benchmark's host-to-device direction);
    /// returns its length.
    #[gpu_rpc(parallel)]
    fn source(&self, out: &mut [u8]) -> u64;
    /// Fill the first half of `out` with [`byte`]`(seed, i)` and leave the
    /// rest; returns how many bytes of `out` were not zero when the method
    /// got it (an out-buffer starts zeroed, whatever earlier calls wrote
    /// into the host memory it is lent).
    fn give_half(&self, seed: u64, out: &mut [u8]) -> u64;
}

//! The randomized conformance kernel of issue 12 (NVPTX): every thread runs
//! the program that `(seed, gid)` draws (see
//! `gpu_example_services::conform`), calling the host's `Conform` service
//! from divergent control flow — different call sites per method, loops with
//! per-lane trip counts, both sides of if/else, early returns and the `-> !`
//! `finish` from part of a warp — and publishes what it saw in `results`.
//! The host (`gpu_conform`) checks every lane's calls and results against
//! its model of the same programs.

use core::arch::nvptx::*;

use gpu_example_services::conform::{run_lane, RESULT_WORDS};
use gpu_example_services::ConformClient;
use gpu_rpc::protocol::{Client, ClientDesc};

/// Runs lane `gid`'s program of `steps` top-level ops under `seed`, then
/// stores its [`LaneResult`](gpu_example_services::conform::LaneResult)
/// (`RESULT_WORDS` words) at `results[gid * RESULT_WORDS..]` — before the
/// lane returns early or halts in `finish`.
///
/// # Safety
/// `desc` describes a live region; `results` has `RESULT_WORDS` `u64`s per
/// thread of the (1-D) grid.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn conform_kernel(desc: ClientDesc, seed: u64, steps: u32, results: *mut u64) {
    // SAFETY: reading special registers has no preconditions.
    let gid = unsafe { _block_idx_x() * _block_dim_x() + _thread_idx_x() } as u32;
    // SAFETY: the host passed a live descriptor.
    let client = unsafe { Client::from_desc(&desc) };
    let conform = ConformClient::new(&client);
    run_lane(&conform, seed, gid, steps, |r| {
        for (i, w) in r.to_words().into_iter().enumerate() {
            // SAFETY: the caller gives every thread `RESULT_WORDS` slots; only
            // this thread writes its own.
            unsafe { results.add(gid as usize * RESULT_WORDS + i).write(w) };
        }
    });
}

//! The lanes of one call on several host threads: how the dispatch that
//! `#[gpu_rpc]` generates for a `#[gpu_rpc(parallel)]` method runs its
//! host method.
//!
//! A generated arm for such a method first reads every lane's arguments and
//! takes its out-buffers on the serving thread (the call's state is the
//! thread's own: [`ServerCall`] is not `Sync`;
//! [`ServerCall::lane_out_buffer`] leaves an out-buffer's zeroing to the
//! lane's thread). Then, wave by wave ([`ServerCall::parallel_wave`]), it
//! hands each lane's host method, with those arguments, to
//! [`ServerCall::run_parallel`], which runs them on up to
//! [`ServerConfig::lane_threads`] threads (the serving thread and the
//! dispatcher's kept helpers, `lane_pool.rs`); back on the serving thread
//! it stores each lane's results and hands its out-buffers on to the copy
//! to the device ([`ServerCall::lane_stored`]) while the next wave runs.
//! Last, [`ServerCall::end_parallel`] answers the lanes that failed and
//! sends what is left. A call that moves less than twice
//! [`ServerConfig::parallel_min_bytes`], or has one lane, takes the plain
//! arm instead ([`ServerCall::run`], in lane order). What crosses threads
//! is only what the method itself receives (its arguments, its
//! out-buffers' slices) and what it returns.

use std::sync::{Mutex, PoisonError};

use super::server_call::catch_lane;
use super::*;

/// Where a call's out-buffers go to the device while it runs (a loan), a
/// parallel arm runs its lanes in about this many waves: the copy of one
/// wave's out-buffers overlaps the next wave's methods, as the plain arm's
/// copies overlap its next lanes' methods. (The last wave's copy is left
/// after the methods: a quarter of the call's, not all of it.)
const WAVES: usize = 4;

/// One lane of a parallel run: its number, the arguments of its host method
/// until a thread takes them, and what the method gave.
type LaneSlot<P, R> = (u32, Option<P>, Option<Result<R, LaneError>>);

impl ServerCall<'_> {
    /// Run `work` once per item (one item per lane: its lane and the
    /// arguments of its host method), catching each panic, and give back
    /// each lane's result in the items' order.
    ///
    /// The items run on up to [`ServerConfig::lane_threads`] threads (the
    /// serving thread and the dispatcher's kept helpers, `lane_pool.rs`,
    /// each a run of neighbouring lanes), one per
    /// [`ServerConfig::parallel_min_bytes`] of the call's streamed arguments
    /// and out-buffers; else in order on the serving thread. A helper the
    /// OS refused to start leaves its share to the others (to the serving
    /// thread if none started). A lane whose method panics gets
    /// [`Status::HandlerPanicked`], as in [`run`](Self::run).
    ///
    /// # Example
    ///
    /// The arm a hand-written dispatch would have for
    /// `fn fill(&self, seed: u8, out: &mut [u8])` with its lanes on several
    /// threads, as `#[gpu_rpc(parallel)]` generates it: read on the serving
    /// thread, then wave by wave run, store and hand on, then end.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::server::{LaneError, ServerCall};
    ///
    /// fn fill_arm(call: &mut ServerCall<'_>) {
    ///     let mut failed: Vec<(u32, LaneError)> = Vec::new();
    ///     {
    ///         let call = &*call;
    ///         let (mut seeds, mut outs) = (Vec::new(), Vec::new());
    ///         for lane in call.lanes() {
    ///             let read = call
    ///                 .arg_at::<u8>(lane, 0, 0)
    ///                 .and_then(|seed| Ok((seed, call.lane_out_buffer::<u8>(lane, 0)?)));
    ///             match read {
    ///                 Ok((seed, out)) => {
    ///                     seeds.push((lane, seed));
    ///                     outs.push(out);
    ///                 }
    ///                 Err(e) => failed.push((lane, e)),
    ///             }
    ///         }
    ///         let wave = call.parallel_wave(seeds.len());
    ///         let (mut seeds, mut outs) = (seeds.into_iter(), outs.into_iter());
    ///         loop {
    ///             let mut wave_outs: Vec<_> = outs.by_ref().take(wave).collect();
    ///             if wave_outs.is_empty() {
    ///                 break;
    ///             }
    ///             let work: Vec<_> = wave_outs
    ///                 .iter_mut()
    ///                 .zip(seeds.by_ref())
    ///                 .map(|(out, (lane, seed))| (lane, (seed, out.lane_slice())))
    ///                 .collect();
    ///             // On up to `lane_threads` threads: zero, then fill.
    ///             let results = call.run_parallel(work, |(seed, out)| out.zeroed().fill(seed));
    ///             for ((lane, r), out) in results.into_iter().zip(wave_outs) {
    ///                 match r {
    ///                     Ok(()) => {
    ///                         call.set_out(lane, 0, &out);
    ///                         drop(out);
    ///                         call.lane_stored(lane);
    ///                     }
    ///                     Err(e) => failed.push((lane, e)),
    ///                 }
    ///             }
    ///         }
    ///     }
    ///     call.end_parallel(failed);
    /// }
    /// ```
    pub fn run_parallel<P: Send, R: Send>(
        &self,
        items: Vec<(u32, P)>,
        work: impl Fn(P) -> R + Sync,
    ) -> Vec<(u32, Result<R, LaneError>)> {
        // (The helpers see the method's name, not the call: `ServerCall`
        // stays on this thread.)
        let method = self.method;
        let one = |p: P| catch_lane(method, || Ok(work(p)));
        let threads = self.lane_threads.min(items.len()).max(1);
        if threads == 1 {
            return items.into_iter().map(|(lane, p)| (lane, one(p))).collect();
        }
        // Runs of neighbouring lanes, one per thread: lanes of one call ask
        // for similar work, and each thread's writes stay in one stretch of
        // the call's memory.
        let per = items.len().div_ceil(threads);
        let mut slots: Vec<LaneSlot<P, R>> = items.into_iter().map(|(lane, p)| (lane, Some(p), None)).collect();
        let run = |chunk: &mut [LaneSlot<P, R>]| {
            for (_, p, r) in chunk {
                if let Some(p) = p.take() {
                    *r = Some(one(p));
                }
            }
        };
        {
            // One chunk per task; a task takes its chunk once (`one` catches
            // the panics, so no lock is poisoned).
            let chunks: Vec<Mutex<&mut [LaneSlot<P, R>]>> = slots.chunks_mut(per).map(Mutex::new).collect();
            self.lane_pool.scope(chunks.len(), &|i| {
                run(&mut chunks[i].lock().unwrap_or_else(PoisonError::into_inner));
            });
        }
        slots
            .into_iter()
            .map(|(lane, _, r)| {
                // The scope returns once every task has run (on a helper,
                // or on this thread taking it back).
                (lane, r.expect("every lane of a parallel call runs"))
            })
            .collect()
    }

    /// Whether the lanes of this call to a `#[gpu_rpc(parallel)]` method
    /// run on several threads: it has two lanes or more still `Ok`, and
    /// moves enough bytes for a second thread
    /// ([`ServerConfig::parallel_min_bytes`]). If not, the generated arm
    /// runs them in lane order through [`run`](Self::run).
    pub fn lanes_in_parallel(&self) -> bool {
        self.lane_threads > 1 && self.ok.count_ones() > 1
    }

    /// `f()`, with a panic turned into lane error [`Status::HandlerPanicked`]
    /// (the message names the method), as [`run`](Self::run) does for each
    /// lane: in a parallel arm, around a lane's reads, its host method and
    /// its stores, so that a panic in any of them (a `Wire::decode` too)
    /// fails that lane alone.
    pub fn catch_lane<T>(&self, f: impl FnOnce() -> Result<T, LaneError>) -> Result<T, LaneError> {
        catch_lane(self.method, f)
    }

    /// How many of the `lanes` lanes a parallel arm read to hand
    /// [`run_parallel`](Self::run_parallel) at once: all of them, or,
    /// where the call's out-buffers go to the device while it runs (memory
    /// lent for the call), a wave of about a quarter of them, a whole
    /// number of lanes for each thread. The arm stores a wave's results and
    /// calls [`lane_stored`](Self::lane_stored) for each of its lanes
    /// before it runs the next wave.
    pub fn parallel_wave(&self, lanes: usize) -> usize {
        if self.loan.is_none() {
            return lanes.max(1);
        }
        let threads = self.lane_threads.min(lanes).max(1);
        threads * lanes.div_ceil(threads * WAVES).max(1)
    }

    /// Lane `lane` of a parallel arm is done: its host method ran, its
    /// results are stored and its out-buffers dropped. They go to the
    /// device now, while the next wave's methods run, as
    /// [`run`](Self::run) sends each lane's while the next lane's method
    /// runs; [`end_parallel`](Self::end_parallel) hands on the rest.
    ///
    /// A lane not `Ok`, or stored already, is left as it is; an out-buffer
    /// still alive ([`OutBuffer`] not dropped) is sent after the call.
    pub fn lane_stored(&self, lane: u32) {
        let bit = 1u64.checked_shl(lane).unwrap_or(0);
        if self.ok & bit == 0 || self.stored.get() & bit != 0 {
            return;
        }
        self.stored.set(self.stored.get() | bit);
        if let Some(loan) = &self.loan {
            loan.lane_done(lane);
        }
    }

    /// The end of a parallel arm, once every lane's results are stored and
    /// its out-buffers dropped: answer each lane of `failed` with its error
    /// (logged in lane order, as [`run`](Self::run) logs them), then hand the
    /// out-buffers of the lanes still `Ok` that
    /// [`lane_stored`](Self::lane_stored) did not hand on to the copy to the
    /// device, in lane order.
    pub fn end_parallel(&mut self, mut failed: Vec<(u32, LaneError)>) {
        failed.sort_by_key(|&(lane, _)| lane);
        for (lane, e) in failed {
            self.fail(lane, e);
        }
        if let Some(loan) = &self.loan {
            for lane in iter_lanes(self.ok & !self.stored.get()) {
                loan.lane_done(lane);
            }
        }
    }
}

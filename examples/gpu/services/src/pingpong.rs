//! The layout the ping-pong benchmarks' kernels (`pingpong_kernel`,
//! `pingpong_steps_kernel`) and their host mirror in `gpu_bench` share: `u32`
//! word indices into one pinned mapped buffer, each role on a cache line of
//! its own, and the steps of a call `pingpong_steps_kernel` can add.

/// The GPU's flag: the round trip's number, stored by the GPU.
pub const GPU_FLAG: usize = 0;
/// The host's flag: the number echoed, stored by the host.
pub const HOST_FLAG: usize = 16;
/// Two `u64` payload words the GPU writes before its flag.
pub const PAYLOAD: usize = 32;
/// The `u64` reply word the host writes before its flag.
pub const REPLY: usize = 48;
/// Where the GPU leaves its count of wrong replies when it is done.
pub const WRONG: usize = 60;
/// With [`STEP_SPREAD`], the second payload word (a `u64`, on a line of its
/// own).
pub const SPREAD_SECOND: usize = 64;
/// With [`STEP_SPREAD`], a third payload word (a `u64`, on a line of its
/// own): a one-lane call's header beside its frame word and argument.
pub const SPREAD_THIRD: usize = 80;
/// `u32` words of the buffer.
pub const WORDS: usize = 96;

/// Step bit: two payload words written before the flag (a call's frame and
/// argument), checked by the host.
pub const STEP_PAYLOAD: u32 = 1;
/// Step bit: a reply word read after the host's flag (a call's return
/// value), checked by the GPU.
pub const STEP_REPLY: u32 = 2;
/// Step bit: a lock word in device memory taken and released around each
/// round trip, by a relaxed RMW and a GPU-scope fence at each end (a port's
/// lock as the protocol took it before `6213476`; with
/// [`STEP_LOCK_ORDERED_RMW`] as it takes it now).
pub const STEP_LOCK: u32 = 4;
/// Modifier of [`STEP_LOCK`]: the lock taken with one acquiring RMW
/// (`atom.acquire.gpu`) and released with one releasing RMW
/// (`red.release.gpu`), no separate fences: the protocol's lock now.
pub const STEP_LOCK_ORDERED_RMW: u32 = 8;
/// Modifier of [`STEP_LOCK`]: the RMWs alone, no fences at all. Not a
/// correct lock (one thread takes it here, so nothing goes wrong): it
/// shows what the fences cost.
pub const STEP_LOCK_NO_FENCE: u32 = 16;
/// Modifier of [`STEP_LOCK`]: a plain load of the lock word before the RMW
/// (the protocol's test before test-and-set).
pub const STEP_LOCK_TEST: u32 = 32;
/// The wait polls with acquiring loads (`ld.acquire.sys`, the protocol's
/// wait now) instead of relaxed ones followed by an acquire fence
/// (`fence.acq_rel.sys`, its wait before `44ac377`).
pub const STEP_ACQUIRE_LOAD: u32 = 64;
/// Modifier of [`STEP_PAYLOAD`]: three payload words, each on a cache line
/// of its own (`PAYLOAD`, [`SPREAD_SECOND`], [`SPREAD_THIRD`]), as a
/// one-lane call writes its header, frame word and argument, instead of two
/// words on one line: what each further line written before the flag costs.
pub const STEP_SPREAD: u32 = 128;

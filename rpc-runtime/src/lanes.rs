//! Warp / wavefront operations the protocol needs, one implementation per
//! target, and **the lane rules** every caller of them follows.
//!
//! | target            | lanes | implementation                                  |
//! |-------------------|-------|-------------------------------------------------|
//! | `nvptx64`         | 32    | PTX inline assembly (`activemask`, `match.any.sync`, `vote.sync`, `shfl.sync`, `bar.warp.sync`) |
//! | `amdgpu`          | 64    | LLVM AMDGPU intrinsics (`ballot`, `readlane`, `mbcnt`); wave32 GPUs use the lower half |
//! | everything else   | 1     | the calling host thread is a one-lane warp       |
//!
//! # The lane rules
//!
//! A *group* is the set of lanes that make one call together: they open one
//! port, write one header, fill their own slots of its packets, flip its
//! outbox and read its reply. The protocol is correct only if the lanes of a
//! group agree on everything the group shares, so:
//!
//! 1. **A group is formed by a warp operation, never assumed.** Under
//!    independent thread scheduling (NVIDIA sm_70 and newer) `activemask`
//!    names the lanes executing *this instruction now*; they may have come
//!    from different branches, loop iterations or call sites (a compiler may
//!    share one copy of the call path between call sites). [`group_mask`]
//!    therefore narrows the active lanes to those passing the same key (the
//!    call's opcode and signature) with `match.any.sync`: lanes making
//!    different calls never share a port. On AMDGCN a wavefront's lanes run in
//!    lock step and have no such instruction; [`split_by`] runs the call once
//!    per key, one group at a time, and the generated stubs wrap every call
//!    in it (on NVPTX and the host it just runs the call).
//! 2. **Every value the group shares is agreed by a warp operation**: the port
//!    index, the lock's result and the mailbox words the group acts on are
//!    [`broadcast`] from the group's first lane; per-lane packet counts are
//!    turned into one count with [`ballot`]. No lane acts on a value only it
//!    computed when the others must act the same way.
//! 3. **The flip that publishes a packet waits for the whole group**: every
//!    lane writes its own slot, the group meets at [`sync`] (`bar.warp.sync`,
//!    which also orders the lanes' memory accesses), then a release fence and
//!    **one** lane's store hand the packet over. After seeing the other side's
//!    flip the group acquires (a fence, or on NVPTX the acquiring poll that
//!    saw it) and meets at [`sync`] again before any lane reads its slot.
//! 4. **A group keeps its mask for the whole call.** Every warp operation of a
//!    call names that mask; all its lanes execute the same sequence of them
//!    (same method, same counts), possibly from different instructions, which
//!    `.sync` operations allow on sm_70+. Lanes outside the mask (other groups,
//!    lanes that exited or never called) are never waited for.
//!
//! These are the rules LLVM libc's GPU RPC came to as well (llvm-project
//! PR #182211). `examples/gpu` runs a randomized conformance suite of
//! divergent kernels against them on real GPUs (`gpu_conform`), and the
//! CPU tests check the same code paths with one-lane warps.
//!
//! ```
//! # use rpc_runtime as gpu_rpc;
//! use gpu_rpc::lanes;
//! let mask = lanes::lane_mask();
//! assert_eq!(lanes::LANE_SIZE, 1); // on the host
//! assert_eq!(mask, 1);
//! assert!(lanes::is_first_lane(mask));
//! assert_eq!(lanes::ballot(mask, true), 1);
//! assert_eq!(lanes::broadcast(mask, 7), 7);
//! assert_eq!(lanes::group_mask(0x1_0000), 1);
//! assert_eq!(lanes::split_by(3, || 40 + 2), 42);
//! ```

#[cfg(target_arch = "nvptx64")]
mod imp {
    use core::arch::asm;

    /// Lanes in a warp.
    pub const LANE_SIZE: u32 = 32;

    #[inline(always)]
    pub fn lane_id() -> u32 {
        let id: u32;
        // SAFETY: reads a special register; no memory is touched.
        unsafe { asm!("mov.u32 {0}, %laneid;", out(reg32) id, options(nomem, nostack, preserves_flags)) };
        id
    }

    #[inline(always)]
    pub fn lane_mask() -> u64 {
        let m: u32;
        // SAFETY: `activemask` only reads the warp's execution state.
        unsafe { asm!("activemask.b32 {0};", out(reg32) m, options(nomem, nostack, preserves_flags)) };
        m as u64
    }

    #[inline(always)]
    pub fn ballot(mask: u64, pred: bool) -> u64 {
        let r: u32;
        // SAFETY: a warp vote among the lanes in `mask`, all of which call this
        // (the module's convergence contract); no memory is touched.
        unsafe {
            asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {x}, 0; vote.sync.ballot.b32 {r}, p, {m}; }}",
                r = out(reg32) r,
                x = in(reg32) pred as u32,
                m = in(reg32) mask as u32,
                options(nomem, nostack, preserves_flags)
            )
        };
        r as u64
    }

    #[inline(always)]
    pub fn broadcast(mask: u64, x: u32) -> u32 {
        let src = (mask as u32).trailing_zeros();
        let r: u32;
        // SAFETY: a warp shuffle among the lanes in `mask`, which all call this.
        unsafe {
            asm!(
                "shfl.sync.idx.b32 {r}, {x}, {s}, 31, {m};",
                r = out(reg32) r,
                x = in(reg32) x,
                s = in(reg32) src,
                m = in(reg32) mask as u32,
                options(nomem, nostack, preserves_flags)
            )
        };
        r
    }

    #[inline(always)]
    pub fn sync(mask: u64) {
        // SAFETY: a warp barrier among the lanes in `mask`, which all call this.
        unsafe { asm!("bar.warp.sync {0};", in(reg32) mask as u32, options(nostack, preserves_flags)) };
    }

    #[inline(always)]
    pub fn group_mask(key: u64) -> u64 {
        let m: u32;
        // SAFETY: `activemask` reads the warp's execution state; `match.any.sync`
        // (sm_70+) among exactly those lanes, which all execute it now, returns
        // to each lane the lanes of the mask whose `key` equals its own. No
        // memory is touched.
        unsafe {
            asm!(
                "{{ .reg .b32 a; activemask.b32 a; match.any.sync.b64 {m}, {k}, a; }}",
                m = out(reg32) m,
                k = in(reg64) key,
                options(nomem, nostack, preserves_flags)
            )
        };
        m as u64
    }

    #[inline(always)]
    pub fn split_by<R>(_key: u64, mut f: impl FnMut() -> R) -> R {
        // Groups are formed by `match.any.sync` when the port is opened; lanes
        // of different groups may then run the call side by side, each group
        // naming only its own lanes in every warp operation.
        f()
    }

    #[inline(always)]
    pub fn sleep_briefly() {
        // SAFETY: `nanosleep` (sm_70+) only suspends the thread.
        unsafe { asm!("nanosleep.u32 64;", options(nomem, nostack, preserves_flags)) };
    }

    #[inline(always)]
    pub fn warp_hint() -> u32 {
        use core::arch::nvptx::*;
        // SAFETY: reading thread/block ids has no preconditions.
        unsafe {
            let block = _block_idx_x() as u32
                + _grid_dim_x() as u32 * (_block_idx_y() as u32 + _grid_dim_y() as u32 * _block_idx_z() as u32);
            let tid = _thread_idx_x() as u32
                + _block_dim_x() as u32 * (_thread_idx_y() as u32 + _block_dim_y() as u32 * _thread_idx_z() as u32);
            let warps = (_block_dim_x() as u32 * _block_dim_y() as u32 * _block_dim_z() as u32).div_ceil(32);
            block.wrapping_mul(warps).wrapping_add(tid / 32)
        }
    }

    #[inline(always)]
    pub fn halt() -> ! {
        // SAFETY: `exit` ends this thread; nothing runs after it.
        unsafe { asm!("exit;", options(noreturn, nostack)) }
    }
}

#[cfg(target_arch = "amdgpu")]
mod imp {
    //! AMDGCN through LLVM's `llvm.amdgcn.*` intrinsics (declared here with
    //! `link_llvm_intrinsics`, so the runtime needs no `stdarch_amdgpu`).
    //! LLVM gives the declarations the intrinsics' own attributes
    //! (`convergent` for the cross-lane ones), so they are not moved across
    //! divergent control flow. `rpc-build/tests/amdgcn_rpc.rs` checks how they
    //! come out for gfx90a and gfx942.
    //!
    //! # Wavefront size
    //!
    //! rustc 1.96 exposes no `target_feature` cfg for AMDGPU (`rustc --print cfg
    //! --target amdgcn-amd-amdhsa -C target-cpu=gfx1100` lists none, and
    //! `wavefrontsize32` is not a feature rustc knows), so the lane count
    //! cannot follow the target at compile time. It is 64, the wavefront of
    //! the CDNA GPUs this backend is for (gfx90a, gfx942). On a wave32 target
    //! (RDNA, e.g. gfx1100, unless built with `-C target-feature=+wavefrontsize64`)
    //! the same code is correct: every intrinsic here is defined for wave32
    //! (`ballot.i64` is zero-extended, `mbcnt.hi` adds nothing), so a wave32
    //! wavefront is a 64-lane one whose upper half is never active; packets
    //! then use half of their lane slots.

    /// Lanes in a wavefront (wave64; see the module notes for wave32).
    pub const LANE_SIZE: u32 = 64;

    #[allow(improper_ctypes)]
    extern "C" {
        #[link_name = "llvm.amdgcn.mbcnt.lo"]
        fn mbcnt_lo(mask: u32, add: u32) -> u32;
        #[link_name = "llvm.amdgcn.mbcnt.hi"]
        fn mbcnt_hi(mask: u32, add: u32) -> u32;
        #[link_name = "llvm.amdgcn.ballot.i64"]
        fn ballot_i64(pred: bool) -> u64;
        #[link_name = "llvm.amdgcn.readlane.i32"]
        fn readlane(x: u32, lane: u32) -> u32;
        #[link_name = "llvm.amdgcn.wave.barrier"]
        fn wave_barrier();
        #[link_name = "llvm.amdgcn.s.sleep"]
        fn s_sleep(n: u32);
        #[link_name = "llvm.amdgcn.endpgm"]
        fn endpgm() -> !;
        #[link_name = "llvm.amdgcn.workgroup.id.x"]
        fn workgroup_id_x() -> u32;
        #[link_name = "llvm.amdgcn.workgroup.id.y"]
        fn workgroup_id_y() -> u32;
        #[link_name = "llvm.amdgcn.workgroup.id.z"]
        fn workgroup_id_z() -> u32;
        #[link_name = "llvm.amdgcn.workitem.id.x"]
        fn workitem_id_x() -> u32;
    }

    #[inline(always)]
    pub fn lane_id() -> u32 {
        // SAFETY: `mbcnt` counts the set bits of the mask below this lane
        // (`v_mbcnt_lo/hi_u32_b32`); it has no preconditions and touches no
        // memory.
        unsafe { mbcnt_hi(!0, mbcnt_lo(!0, 0)) }
    }
    #[inline(always)]
    pub fn lane_mask() -> u64 {
        // SAFETY: a ballot of `true` is the EXEC mask: exactly the lanes
        // executing this call together. No memory is touched.
        unsafe { ballot_i64(true) }
    }
    #[inline(always)]
    pub fn ballot(mask: u64, pred: bool) -> u64 {
        // SAFETY: a wavefront ballot (`v_cmp` into an SGPR pair); inactive
        // lanes contribute zero. Every lane of `mask` calls this together
        // (the module's convergence contract).
        unsafe { ballot_i64(pred) & mask }
    }
    #[inline(always)]
    pub fn broadcast(mask: u64, x: u32) -> u32 {
        // `readlane` from the first lane of `mask`, not `readfirstlane`: the
        // two agree whenever exactly the lanes of `mask` are active (the
        // convergence contract), but `readlane` names the source lane, so the
        // result is the documented one even if more lanes happen to be active
        // (e.g. a wavefront that reconverged around a divergent caller).
        // `mask` is wavefront-uniform (it came from a ballot), so the index is
        // uniform, as `v_readlane_b32` needs.
        let src = mask.trailing_zeros() & 63;
        // SAFETY: `src < 64`; reading a lane's VGPR has no other precondition
        // and touches no memory.
        unsafe { readlane(x, src) }
    }
    #[inline(always)]
    pub fn sync(_mask: u64) {
        // SAFETY: the lanes of a wavefront execute in lock step; this is a
        // scheduling barrier (`wave_barrier`) that keeps the compiler from
        // moving memory operations across it. No memory is touched.
        unsafe { wave_barrier() }
    }

    #[inline(always)]
    fn broadcast64(mask: u64, x: u64) -> u64 {
        broadcast(mask, x as u32) as u64 | (broadcast(mask, (x >> 32) as u32) as u64) << 32
    }

    #[inline(always)]
    pub fn group_mask(key: u64) -> u64 {
        // Lock step: the active lanes are the group, provided they agree on
        // the key, which `split_by` (around every generated call) ensures.
        // Lanes that do not agree are left out of the mask; see `open`'s
        // contract for raw port users.
        let mask = lane_mask();
        ballot(mask, key == broadcast64(mask, key))
    }

    #[inline(always)]
    pub fn split_by<R>(key: u64, mut f: impl FnMut() -> R) -> R {
        // Peel one group per round: the first active lane's key, the lanes
        // that share it run `f` (the branch's EXEC mask is exactly them) and
        // leave; the others go round again. `f` runs inside the divergent
        // branch, so no two groups ever run it together.
        loop {
            let mask = lane_mask();
            if key == broadcast64(mask, key) {
                break f();
            }
        }
    }
    #[inline(always)]
    pub fn sleep_briefly() {
        // SAFETY: `s_sleep 1` suspends this wavefront for about 64 clocks.
        unsafe { s_sleep(1) }
    }
    #[inline(always)]
    pub fn warp_hint() -> u32 {
        // SAFETY: reading the dispatch's workgroup/work-item ids has no
        // preconditions. Only the spread of the value matters (it picks the
        // first port to try): 16 wavefronts per workgroup (1024 work-items)
        // is the most a workgroup has, and y/z workgroups are mixed in.
        unsafe {
            let wg = workgroup_id_x()
                .wrapping_add(workgroup_id_y().wrapping_mul(0x9e37))
                .wrapping_add(workgroup_id_z().wrapping_mul(0x7f4a_7c15));
            wg.wrapping_mul(16).wrapping_add(workitem_id_x() / LANE_SIZE)
        }
    }
    #[inline(always)]
    pub fn halt() -> ! {
        // SAFETY: `s_endpgm` ends the wavefront; nothing runs after it.
        // On AMDGPU a lane cannot end alone: this ends every lane of the
        // wavefront, including lanes waiting outside a divergent branch that
        // called it (documented on `lanes::halt`).
        unsafe { endpgm() }
    }
}

#[cfg(all(gpu_rpc_simt, not(any(target_arch = "nvptx64", target_arch = "amdgpu"))))]
#[path = "lanes_sim.rs"]
pub mod sim;
#[cfg(all(gpu_rpc_simt, not(any(target_arch = "nvptx64", target_arch = "amdgpu"))))]
use sim::imp;
#[cfg(all(gpu_rpc_simt, not(feature = "std")))]
compile_error!("--cfg gpu_rpc_simt (the simulated SIMT warp) needs the `std` feature");

#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu", gpu_rpc_simt)))]
mod imp {
    /// Lanes in a host "warp": each host thread is a one-lane warp.
    pub const LANE_SIZE: u32 = 1;

    #[inline(always)]
    pub fn lane_id() -> u32 {
        0
    }
    #[inline(always)]
    pub fn lane_mask() -> u64 {
        1
    }
    #[inline(always)]
    pub fn ballot(mask: u64, pred: bool) -> u64 {
        mask & pred as u64
    }
    #[inline(always)]
    pub fn broadcast(_mask: u64, x: u32) -> u32 {
        x
    }
    #[inline(always)]
    pub fn sync(_mask: u64) {}
    #[inline(always)]
    pub fn group_mask(_key: u64) -> u64 {
        1
    }
    #[inline(always)]
    pub fn split_by<R>(_key: u64, mut f: impl FnMut() -> R) -> R {
        f()
    }
    #[inline(always)]
    pub fn sleep_briefly() {
        #[cfg(feature = "std")]
        std::thread::yield_now();
        #[cfg(not(feature = "std"))]
        core::hint::spin_loop();
    }
    #[inline(always)]
    pub fn warp_hint() -> u32 {
        #[cfg(feature = "std")]
        {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            std::thread_local!(static HINT: u32 = {
                // Relaxed: only uniqueness of the value matters, no other memory
                // is published through this counter.
                NEXT.fetch_add(1, Ordering::Relaxed)
            });
            HINT.with(|h| *h)
        }
        #[cfg(not(feature = "std"))]
        0
    }
    #[inline(always)]
    pub fn halt() -> ! {
        #[cfg(feature = "std")]
        std::panic::resume_unwind(std::boxed::Box::new(super::Halt));
        #[cfg(not(feature = "std"))]
        panic!("gpu_rpc: lane halted")
    }
}

/// The unwind payload [`halt`] throws on the host; the CPU backend catches it
/// and ends the lane (thread) quietly, like `exit;` ends a GPU thread.
#[cfg(feature = "std")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Halt;

/// Number of lanes in this target's warp or wavefront (1 on the host).
pub const LANE_SIZE: u32 = imp::LANE_SIZE;

/// This lane's index inside its warp, `0..LANE_SIZE`.
#[inline(always)]
pub fn lane_id() -> u32 {
    imp::lane_id()
}

/// The mask of lanes executing this call together.
#[inline(always)]
pub fn lane_mask() -> u64 {
    imp::lane_mask()
}

/// Bit `i` set iff lane `i` of `mask` passed `pred == true`.
#[inline(always)]
pub fn ballot(mask: u64, pred: bool) -> u64 {
    imp::ballot(mask, pred)
}

/// `x` as seen by the first lane of `mask`, returned to every lane.
#[inline(always)]
pub fn broadcast(mask: u64, x: u32) -> u32 {
    imp::broadcast(mask, x)
}

/// Wait until every lane of `mask` reaches this point.
#[inline(always)]
pub fn sync(mask: u64) {
    imp::sync(mask)
}

/// The lanes executing this call together whose `key` equals this lane's:
/// the mask of this lane's group (rule 1 of the [lane rules](self)).
/// `match.any.sync` on NVPTX; on AMDGCN the active lanes that share the first
/// active lane's key (inside [`split_by`] that is all of them); `1` on the host.
#[inline(always)]
pub fn group_mask(key: u64) -> u64 {
    imp::group_mask(key)
}

/// Run `f` once on every active lane such that the lanes running it together
/// agree on `key`. On AMDGCN, where a wavefront's lanes run in lock step, this
/// peels one group of equal keys at a time; on NVPTX (where [`group_mask`]
/// splits lanes at the port) and on the host it just runs `f`. The generated
/// stubs wrap every call in it, keyed by the call's opcode and signature.
#[inline(always)]
pub fn split_by<R>(key: u64, f: impl FnMut() -> R) -> R {
    imp::split_by(key, f)
}

/// True on the lowest-numbered lane of `mask`.
#[inline(always)]
pub fn is_first_lane(mask: u64) -> bool {
    lane_id() == mask.trailing_zeros()
}

/// Back off briefly inside a wait loop (`nanosleep` on NVPTX, `s_sleep` on
/// AMDGCN, a thread yield on the host).
#[inline(always)]
pub fn sleep_briefly() {
    imp::sleep_briefly()
}

/// A per-warp number used to spread warps over ports: the global warp index on
/// a GPU, a per-thread counter on the host. Only its spread matters.
#[inline(always)]
pub fn warp_hint() -> u32 {
    imp::warp_hint()
}

/// End this lane for good: `exit;` on NVPTX, `s_endpgm` on AMDGCN; on the host
/// it unwinds with [`Halt`], which the CPU backend catches to end the thread.
///
/// On AMDGCN a lane cannot end alone: `s_endpgm` ends the whole wavefront,
/// including lanes that are waiting outside a divergent branch that called
/// this (LLVM libc's `gpu::end_program` behaves the same). Call it from
/// converged code, or only when the other lanes of the wavefront have nothing
/// left to do.
#[inline(always)]
pub fn halt() -> ! {
    imp::halt()
}

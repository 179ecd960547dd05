//! Atomics used by the protocol: `core`'s in normal builds, loom's under
//! `cfg(loom)` so the model checker sees every access to shared words.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Spin-wait hint. Under loom this yields to the model's scheduler, which is
/// required for spin loops to terminate in the model.
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    crate::lanes::sleep_briefly();
}

/// Bounded spinning before backing off: a host thread spins with the CPU's
/// pause hint for a while (a mailbox flip usually lands within a microsecond
/// or two) and then yields; a GPU lane sleeps briefly at once.
pub(crate) struct Backoff {
    spins: u32,
}

impl Backoff {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Backoff { spins: 0 }
    }

    #[inline(always)]
    pub(crate) fn snooze(&mut self) {
        #[cfg(not(any(loom, target_arch = "nvptx64", target_arch = "amdgpu")))]
        {
            if self.spins < 256 {
                self.spins += 1;
                core::hint::spin_loop();
                return;
            }
        }
        let _ = &mut self.spins;
        spin_hint();
    }
}

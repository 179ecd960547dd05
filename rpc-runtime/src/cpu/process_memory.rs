//! The CPU backend's [`DeviceMemory`]: its client lanes are this process's
//! threads, so "device memory" is this process's memory, read and written
//! with `process_vm_readv`/`process_vm_writev` on the process itself. The
//! kernel checks every address: one the process has not mapped (a lying or
//! stale pointer) fails with `EFAULT` instead of faulting the server.

use std::ptr::NonNull;

use crate::device_memory::{CopyError, DeviceMemory, EarlyWrites, Lent};

/// This process's memory, as the CPU backend's server copies direct slices
/// (see [the direct path](crate::call#the-direct-path)).
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cpu::ProcessMemory;
/// use gpu_rpc::device_memory::DeviceMemory;
/// let src = [1u8, 2, 3];
/// let mut dst = [0u8; 3];
/// let mut failed = Vec::new();
/// ProcessMemory.read(&mut [(src.as_ptr() as u64, &mut dst[..])], &mut |k, e| failed.push((k, e)));
/// assert_eq!(dst, src);
/// // Page 0 is never mapped: refused, not a crash.
/// ProcessMemory.read(&mut [(8, &mut dst[..])], &mut |k, e| failed.push((k, e)));
/// assert_eq!(failed.len(), 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessMemory;

#[cfg(target_os = "linux")]
impl ProcessMemory {
    /// Move `len` bytes between `local` and `remote` in this process:
    /// `read` is `process_vm_readv`, else `process_vm_writev`. Retries the
    /// partial transfers the kernel may make; fails with the OS error.
    fn transfer(local: *mut u8, remote: u64, len: usize, read: bool) -> Result<(), CopyError> {
        let what = if read { "process_vm_readv" } else { "process_vm_writev" };
        let mut done = 0usize;
        while done < len {
            let l = libc::iovec {
                // SAFETY: `done < len`: the offset stays inside the caller's
                // buffer.
                iov_base: unsafe { local.add(done) }.cast(),
                iov_len: len - done,
            };
            let r = libc::iovec {
                iov_base: (remote.wrapping_add(done as u64)) as usize as *mut libc::c_void,
                iov_len: len - done,
            };
            // SAFETY: `l` covers `len - done` bytes of the caller's buffer
            // (readable for a write, writable for a read, and borrowed by the
            // caller for the call); the kernel checks `r` against this
            // process's mappings and fails with EFAULT rather than fault.
            let n = unsafe {
                if read {
                    libc::process_vm_readv(libc::getpid(), &l, 1, &r, 1, 0)
                } else {
                    libc::process_vm_writev(libc::getpid(), &l, 1, &r, 1, 0)
                }
            };
            if n <= 0 {
                let code = if n == 0 {
                    0
                } else {
                    std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64
                };
                return Err(CopyError { what, code });
            }
            done += n as usize;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
impl DeviceMemory for ProcessMemory {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        for (k, (at, dst)) in copies.iter_mut().enumerate() {
            if let Err(e) = Self::transfer(dst.as_mut_ptr(), *at, dst.len(), true) {
                failed(k, e);
            }
        }
    }

    /// Ordinary heap memory (the CPU has no faster kind), so the CPU tests
    /// run the server's lent-memory path.
    fn lend(&self, bytes: usize) -> Option<Lent<'_>> {
        let mut v = Vec::new();
        v.try_reserve_exact(bytes).ok()?;
        v.resize(bytes, 0u8);
        let raw = Box::into_raw(v.into_boxed_slice());
        // SAFETY: `raw` came from `Box::into_raw` just above.
        let ptr = NonNull::new(unsafe { (*raw).as_mut_ptr() })?;
        // SAFETY: the box is rebuilt once, when the loan ends.
        let back = Box::new(move || drop(unsafe { Box::from_raw(raw) }));
        // SAFETY: the `bytes` bytes are the loan's alone until `back` frees
        // them.
        Some(unsafe { Lent::new(ptr, bytes, back) })
    }

    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        for (k, (at, src)) in copies.iter().enumerate() {
            // `process_vm_writev` only reads the local buffer.
            if let Err(e) = Self::transfer(src.as_ptr().cast_mut(), *at, src.len(), false) {
                failed(k, e);
            }
        }
    }

    /// Out-buffers stored the moment they are sent (the CPU has no copy
    /// engine to overlap), so the CPU tests run the server's early path.
    fn early_writes(&self) -> Option<Box<dyn EarlyWrites + '_>> {
        Some(Box::new(WriteNow))
    }
}

/// [`ProcessMemory`]'s early writes: each copy done when sent.
#[cfg(target_os = "linux")]
struct WriteNow;

#[cfg(target_os = "linux")]
impl EarlyWrites for WriteNow {
    unsafe fn send(&mut self, at: u64, bytes: &[u8]) -> Result<(), CopyError> {
        // `process_vm_writev` only reads the local buffer.
        ProcessMemory::transfer(bytes.as_ptr().cast_mut(), at, bytes.len(), false)
    }

    fn finish(&mut self) -> Result<(), CopyError> {
        Ok(())
    }
}

/// Elsewhere the CPU backend's lanes never ask for direct copies
/// ([`launch_many`](super::launch_many) turns them on only on Linux), and
/// a copy fails.
#[cfg(not(target_os = "linux"))]
impl DeviceMemory for ProcessMemory {
    fn read(&self, copies: &mut [(u64, &mut [u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        for k in 0..copies.len() {
            failed(
                k,
                CopyError {
                    what: "direct copies (Linux only)",
                    code: 0,
                },
            );
        }
    }

    fn write(&self, copies: &[(u64, &[u8])], failed: &mut dyn FnMut(usize, CopyError)) {
        for k in 0..copies.len() {
            failed(
                k,
                CopyError {
                    what: "direct copies (Linux only)",
                    code: 0,
                },
            );
        }
    }
}

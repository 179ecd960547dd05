//! What gpu_rpc costs a compute kernel that only *may* call the host: two
//! kernels written the way CUDA programmers write them, a memory-bound SAXPY
//! (`y[i] = a * x[i] + y[i]`) and a compute-bound FMA chain, each twice —
//! without gpu_rpc, and with one conditional `gpu_println!` and an
//! `assert!` (reported by the crate's `gpu_panic_handler!()`). Registers are
//! checked against a budget by `examples/gpu/tests/ptx.rs`, run time is
//! `gpu_bench tax`. The kernels without gpu_rpc take the launch's
//! descriptor too (every launch of the CUDA backend passes one) and ignore
//! it, so both halves of a pair launch the same way.

#[cfg(target_arch = "nvptx64")]
mod nvptx {
    use core::arch::nvptx::*;

    use gpu_rpc::gpu_println;
    use gpu_rpc::protocol::ClientDesc;
    use gpu_rpc::services;

    /// Global 1-D thread index.
    #[inline(always)]
    fn gid() -> usize {
        // SAFETY: reading special registers has no preconditions.
        unsafe { (_block_idx_x() * _block_dim_x() + _thread_idx_x()) as usize }
    }

    /// `y[i] = a * x[i] + y[i]` for `i < n`, one element per thread
    /// (`_desc` is ignored).
    ///
    /// # Safety
    /// `x` and `y` point to `n` `f32`s of device memory; `y` is not read or
    /// written by anyone else while the kernel runs.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn saxpy_kernel(_desc: ClientDesc, n: u32, a: f32, x: *const f32, y: *mut f32) {
        let i = gid();
        if i < n as usize {
            // SAFETY: `i < n` and the caller's contract.
            unsafe { *y.add(i) = a * *x.add(i) + *y.add(i) };
        }
    }

    /// [`saxpy_kernel`], plus what a user adds to a compute kernel: a check
    /// of its inputs (`assert!`, reported on the host by the panic handler)
    /// and a `gpu_println!` on a cold branch (a result that is not finite).
    ///
    /// # Safety
    /// As [`saxpy_kernel`]; `desc` describes a live region served with the
    /// standard services.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn saxpy_print_kernel(desc: ClientDesc, n: u32, a: f32, x: *const f32, y: *mut f32) {
        assert!(!x.is_null() && !y.is_null(), "saxpy: null input");
        let i = gid();
        if i < n as usize {
            // SAFETY: `i < n` and the caller's contract.
            let v = unsafe { a * *x.add(i) + *y.add(i) };
            // SAFETY: as above.
            unsafe { *y.add(i) = v };
            if !v.is_finite() {
                // SAFETY: the descriptor the host passed to this kernel.
                unsafe { services::init(&desc) };
                gpu_println!("saxpy: y[{}] = {} is not finite", i, v);
            }
        }
    }

    /// `iters` steps of `v = v * 0.999 + 0.001` (fused multiply-adds, in
    /// blocks of eight) on `x[i]` for `i < n`, one element per thread: a
    /// compute-bound kernel (`_desc` is ignored).
    ///
    /// # Safety
    /// `x` points to `n` `f32`s of device memory used by no one else.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn fma_kernel(_desc: ClientDesc, n: u32, iters: u32, x: *mut f32) {
        let i = gid();
        if i < n as usize {
            // SAFETY: `i < n` and the caller's contract.
            unsafe { *x.add(i) = chain(*x.add(i), iters) };
        }
    }

    /// [`fma_kernel`] with what a user adds: an `assert!` on its input and
    /// a `gpu_println!` on a cold branch (a result that is not finite).
    ///
    /// # Safety
    /// As [`fma_kernel`]; `desc` describes a live region served with the
    /// standard services.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn fma_print_kernel(desc: ClientDesc, n: u32, iters: u32, x: *mut f32) {
        assert!(!x.is_null(), "fma: null input");
        let i = gid();
        if i < n as usize {
            // SAFETY: `i < n` and the caller's contract.
            let v = chain(unsafe { *x.add(i) }, iters);
            // SAFETY: as above.
            unsafe { *x.add(i) = v };
            if !v.is_finite() {
                // SAFETY: the descriptor the host passed to this kernel.
                unsafe { services::init(&desc) };
                gpu_println!("fma: x[{}] = {} is not finite", i, v);
            }
        }
    }

    /// The FMA chain of [`fma_kernel`].
    #[inline(always)]
    fn chain(mut v: f32, iters: u32) -> f32 {
        let mut k = 0;
        while k < iters {
            // Eight dependent steps per trip (`iters` is rounded up to 8).
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            v = v * 0.999 + 0.001;
            k += 8;
        }
        v
    }
}

//! SAXPY (`y[i] = a * x[i] + y[i]`), written the way CUDA programmers write
//! it, twice: `saxpy_kernel` without gpu_rpc and `saxpy_print_kernel` with
//! one conditional `gpu_println!` and an `assert!` (reported by the crate's
//! `gpu_panic_handler!()`). The pair measures what gpu_rpc costs a compute
//! kernel that only *may* call the host: registers (checked against a budget
//! by `examples/gpu/tests/footprint.rs`) and run time (`gpu_bench`'s tax rows).

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

    /// `y[i] = a * x[i] + y[i]` for `i < n`, one element per thread.
    ///
    /// # Safety
    /// `x` and `y` point to `n` `f32`s of device memory; `y` is not read or
    /// written by anyone else while the kernel runs.
    #[no_mangle]
    pub unsafe extern "ptx-kernel" fn saxpy_kernel(n: u32, a: f32, x: *const f32, y: *mut f32) {
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
}

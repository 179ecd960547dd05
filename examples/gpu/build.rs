//! Builds ./kernels to PTX for sm_90 and embeds it (see rpc-build). Optional:
//! without a device toolchain the PTX is empty and the binaries say so.
fn main() {
    let sm = std::env::var("GPU_RPC_SM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90);
    let emitted = rpc_build::DeviceBuild::new("kernels")
        .target(rpc_build::Target::Nvptx { sm })
        .optional(true)
        // The compute kernels with a print hold CUDA printf's register
        // figure: their own frames need about 10, and the cold print and panic
        // paths they may call (separate functions) are held to the same limit
        // instead of lifting it.
        .kernel_max_registers("saxpy_print_kernel", 24)
        .kernel_max_registers("fma_print_kernel", 24)
        .build_to_out_dir("kernels.ptx")
        .unwrap_or_else(|e| panic!("{e}"));
    if let rpc_build::Emitted::Skipped { reason, .. } = &emitted {
        println!("cargo:warning=GPU kernels not built: {reason}");
    }
}

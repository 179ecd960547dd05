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
        .build_to_out_dir("kernels.ptx")
        .unwrap_or_else(|e| panic!("{e}"));
    if let rpc_build::Emitted::Skipped { reason, .. } = &emitted {
        println!("cargo:warning=GPU kernels not built: {reason}");
    }
}

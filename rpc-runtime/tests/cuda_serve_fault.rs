//! A fault in a kernel the caller launched with `cudarc` while
//! `cuda::Serve` served it (feature `cuda`). In its own test binary because
//! a fault leaves the process's CUDA context unusable.
//!
//! Skipped (visibly) on a machine without the NVIDIA driver or GPU.
#![cfg(feature = "cuda")]

use std::time::{Duration, Instant};

use cudarc::driver::{LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use rpc_runtime::cuda::{CudaError, Serve, ServeConfig};
use rpc_runtime::server::{Dispatcher, ServerConfig};

mod support;

/// Takes the descriptor like an RPC kernel, then traps.
const TRAP_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry trap_after_desc(
	.param .align 8 .b8 trap_after_desc_param_0[24]
)
{
	trap;
	ret;
}
"#;

#[test]
fn a_fault_in_a_cudarc_launch_is_a_sticky_kernel_error_from_finish() {
    let Some(dev) = support::gpu() else {
        return;
    };
    let ctx = dev.context().clone();
    let stream = ctx.new_stream().unwrap();
    let module = ctx.load_module(Ptx::from_src(TRAP_PTX)).unwrap();
    let f = module.load_function("trap_after_desc").unwrap();
    let d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    let rpc = Serve::start(&ctx, d, &ServeConfig::default()).unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(rpc.desc());
    // SAFETY: the kernel takes the 24-byte descriptor by value.
    unsafe { launch.launch(LaunchConfig::for_num_elems(256)) }.unwrap();
    let start = Instant::now();
    // The caller sees the fault from cudarc ...
    let seen = stream.synchronize();
    eprintln!("stream.synchronize(): {seen:?}");
    assert!(seen.is_err(), "the trap is reported on the stream");
    // ... and `finish` reports it as the backend does, without hanging.
    let e = rpc.finish().unwrap_err();
    eprintln!("{e}");
    assert!(start.elapsed() < Duration::from_secs(60), "finish returned promptly");
    match &e {
        CudaError::KernelFault { name, context_lost, .. } => {
            assert!(name.starts_with("CUDA_ERROR_"), "{e}");
            assert!(*context_lost, "a trap is a sticky error: {e}");
        }
        other => panic!("expected CudaError::KernelFault, got {other:?}"),
    }
    assert!(e.to_string().contains("unusable"), "{e}");
}

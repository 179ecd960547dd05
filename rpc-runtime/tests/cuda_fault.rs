//! A kernel fault (feature `cuda`). In its own test binary because a fault
//! leaves the process's CUDA context unusable for everything after it.
//!
//! Skipped (with a message) on a machine without the NVIDIA driver or GPU.
#![cfg(feature = "cuda")]

use std::time::{Duration, Instant};

mod support;

use rpc_runtime::cuda::{launch_with_region, CudaError, CudaRegion, Launch, Module};
use rpc_runtime::server::{Dispatcher, ServerConfig};

/// `trap_kernel(desc: ClientDesc)`: every thread executes `trap`.
const TRAP_PTX: &str = r#"
.version 7.8
.target sm_90
.address_size 64

.visible .entry trap_kernel(
	.param .align 8 .b8 trap_kernel_param_0[24]
)
{
	trap;
	ret;
}
"#;

#[test]
fn a_trapping_kernel_is_a_sticky_kernel_error_and_nothing_hangs() {
    let Some(dev) = support::gpu() else {
        return;
    };
    let module = Module::from_ptx(&dev, TRAP_PTX).unwrap();
    let kernel = module.kernel("trap_kernel").unwrap();
    let region = CudaRegion::new(&dev, 64).unwrap();
    let d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    let cfg = Launch {
        grid: (4, 1, 1),
        block: (64, 1, 1),
        server_threads: 4,
        ..Launch::default()
    };
    let start = Instant::now();
    let e = launch_with_region(&region, &kernel, &cfg, &d, &[]).unwrap_err();
    eprintln!("{e}");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "the launch returned promptly"
    );
    match &e {
        CudaError::KernelFault {
            kernel,
            name,
            context_lost,
            ..
        } => {
            assert_eq!(kernel, "trap_kernel");
            assert!(name.starts_with("CUDA_ERROR_"), "{e}");
            assert!(*context_lost, "a trap is a sticky error: {e}");
        }
        other => panic!("expected CudaError::KernelFault, got {other:?}"),
    }
    assert!(e.to_string().contains("trap_kernel"), "{e}");
    assert!(e.to_string().contains("unusable"), "{e}");
    // The context is gone: later calls fail cleanly (no panic, no hang), and
    // dropping everything (which cannot free anything now) does not panic.
    let later = CudaRegion::new(&dev, 1).and_then(|r| r.is_quiescent());
    eprintln!("after the fault: {later:?}");
    assert!(later.is_err(), "a sticky error fails every later CUDA call");
    drop(kernel);
    drop(module);
    drop(region);
}

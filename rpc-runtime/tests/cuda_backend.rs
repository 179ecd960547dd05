//! Tests of the CUDA backend (feature `cuda`).
//!
//! On a machine without the NVIDIA driver every GPU test prints
//! `skipped: <test>: no CUDA driver ...` (visibly) and passes; `missing_driver_is_a_clean_error` runs
//! everywhere. The tests that need a real RPC kernel read the path of a PTX
//! file from `GPU_RPC_TEST_PTX` (written by the device build) and are skipped
//! when it is unset. The other GPU tests use small hand-written PTX modules
//! embedded below, so they need only a GPU.
//!
//! A kernel fault poisons the whole CUDA context of the process, so the fault
//! test lives in its own test binary (`cuda_fault.rs`).
#![cfg(feature = "cuda")]

mod support;
use support::{gpu, skipped};

use rpc_runtime::cuda::MappedBuffer;
use rpc_runtime::cuda::{
    driver_available, launch, launch_with_region, CudaDevice, CudaError, CudaRegion, KernelArg, Launch, Module,
    PinnedBuffer,
};
use rpc_runtime::protocol::ClientDesc;
use rpc_runtime::server::{Dispatcher, ServerConfig};

/// Environment variable naming the PTX file with `rpc_noop_kernel`.
const PTX_ENV: &str = "GPU_RPC_TEST_PTX";

/// Hand-written PTX used by the GPU tests that need no RPC client.
///
/// * `desc_echo(desc: ClientDesc, tag: u32, out: *mut u64)`: thread 0 of
///   block 0 writes `desc.shared`, `desc.locks`, `desc.port_count`,
///   `desc.lane_size`, `tag`, the first client lock word (device memory) and
///   the first client outbox word (pinned host memory) to `out[0..7]`.
/// * `no_params()`: does nothing.
/// * `u64_first(p: u64)`: does nothing (its first parameter is not a
///   `ClientDesc`).
const TEST_PTX: &str = r#"//
// gpu_rpc cuda backend tests (hand-written)
//
.version 7.8
.target sm_90
.address_size 64

.visible .entry desc_echo(
	.param .align 8 .b8 desc_echo_param_0[24],
	.param .u32 desc_echo_param_1,
	.param .u64 desc_echo_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<16>;

	mov.u32 	%r1, %tid.x;
	mov.u32 	%r2, %ctaid.x;
	or.b32 	%r3, %r1, %r2;
	setp.ne.s32 	%p1, %r3, 0;
	@%p1 bra 	$L__done;
	ld.param.u64 	%rd1, [desc_echo_param_0];
	ld.param.u64 	%rd2, [desc_echo_param_0+8];
	ld.param.u32 	%r4, [desc_echo_param_0+16];
	cvt.u64.u32 	%rd3, %r4;
	ld.param.u32 	%r5, [desc_echo_param_0+20];
	cvt.u64.u32 	%rd4, %r5;
	ld.param.u32 	%r6, [desc_echo_param_1];
	cvt.u64.u32 	%rd5, %r6;
	ld.param.u64 	%rd6, [desc_echo_param_2];
	cvta.to.global.u64 	%rd7, %rd6;
	cvta.to.global.u64 	%rd8, %rd2;
	ld.volatile.global.u32 	%r7, [%rd8];
	cvt.u64.u32 	%rd9, %r7;
	cvta.to.global.u64 	%rd10, %rd1;
	ld.volatile.global.u32 	%r7, [%rd10];
	cvt.u64.u32 	%rd11, %r7;
	st.global.u64 	[%rd7], %rd1;
	st.global.u64 	[%rd7+8], %rd2;
	st.global.u64 	[%rd7+16], %rd3;
	st.global.u64 	[%rd7+24], %rd4;
	st.global.u64 	[%rd7+32], %rd5;
	st.global.u64 	[%rd7+40], %rd9;
	st.global.u64 	[%rd7+48], %rd11;
	membar.sys;
$L__done:
	ret;
}

.visible .entry no_params()
{
	ret;
}

.visible .entry u64_first(
	.param .u64 u64_first_param_0
)
{
	ret;
}
"#;

fn quiet() -> Dispatcher {
    Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    })
}

/// The PTX with `rpc_noop_kernel`, or `None` (after printing why).
fn rpc_ptx() -> Option<String> {
    let Some(path) = std::env::var_os(PTX_ENV) else {
        skipped(&format!(
            "{PTX_ENV} is not set (path of a PTX file with `rpc_noop_kernel`, from the device build)"
        ));
        return None;
    };
    Some(std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{PTX_ENV}={}: {e}", path.to_string_lossy())))
}

#[test]
fn missing_driver_is_a_clean_error() {
    if driver_available() {
        eprintln!("libcuda is present: checking a bad ordinal instead of the missing driver");
        let e = CudaDevice::new(9999).unwrap_err();
        assert!(matches!(e, CudaError::Driver { .. }), "{e}");
        assert!(e.to_string().contains("CUDA device 9999"), "{e}");
        return;
    }
    let e = CudaDevice::new(0).unwrap_err();
    assert!(matches!(e, CudaError::DriverNotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("libcuda could not be loaded"), "{msg}");
    assert!(msg.contains("libcuda.so"), "the message names what was searched: {msg}");
    assert!(CudaDevice::count().is_err());
    assert!(CudaDevice::driver_version().is_err());
}

#[test]
fn device_properties() {
    let Some(dev) = gpu() else { return };
    let name = dev.name().unwrap();
    let (major, minor) = dev.compute_capability().unwrap();
    let sms = dev.sm_count().unwrap();
    let (cuda_major, cuda_minor) = CudaDevice::driver_version().unwrap();
    eprintln!("device 0: {name}, sm_{major}{minor}, {sms} SMs, driver CUDA {cuda_major}.{cuda_minor}");
    assert!(!name.is_empty());
    assert!(
        major >= 7,
        "the protocol needs system-scope atomics (sm_70+), got sm_{major}{minor}"
    );
    assert!(sms > 0);
    assert!(CudaDevice::count().unwrap() >= 1);
}

#[test]
fn region_descriptor_reaches_the_kernel() {
    let Some(dev) = gpu() else { return };
    let module = Module::from_ptx(&dev, TEST_PTX).unwrap();
    assert_eq!(module.entries(), ["desc_echo", "no_params", "u64_first"]);
    let kernel = module.kernel("desc_echo").unwrap();
    if let Some(sizes) = kernel.param_sizes() {
        assert_eq!(sizes, [24, 4, 8], "parameter sizes as the driver reports them");
    } else {
        eprintln!("note: the driver does not report parameter sizes; launches are unchecked");
    }
    let region = CudaRegion::new(&dev, 40).unwrap();
    assert!(region.is_quiescent().unwrap());
    let desc: ClientDesc = region.client_desc();
    assert_eq!((desc.port_count, desc.lane_size), (40, 32));
    assert_eq!(desc.shared % 64, 0);
    let out = PinnedBuffer::new(&dev, 7 * 8).unwrap();
    let cfg = Launch {
        grid: (2, 1, 1),
        block: (64, 1, 1),
        server_threads: 2,
        ..Launch::default()
    };
    let report = launch_with_region(
        &region,
        &kernel,
        &cfg,
        &quiet(),
        &[KernelArg::U32(0xC0FFEE), KernelArg::Ptr(out.device_ptr())],
    )
    .unwrap();
    assert_eq!((report.calls, report.errors, report.port_count), (0, 0, 40));
    // SAFETY: the launch has returned, so the kernel is over; nothing else
    // writes the buffer.
    let got: Vec<u64> = (0..7).map(|i| unsafe { out.read_u64(i) }).collect();
    assert_eq!(
        got,
        [desc.shared, desc.locks, 40, 32, 0xC0FFEE, 0, 0],
        "what the kernel saw"
    );
    assert!(region.is_quiescent().unwrap());
    eprintln!(
        "desc_echo: {:?} wall, {:?} on the GPU",
        report.elapsed, report.kernel_time
    );
}

#[test]
fn launches_are_checked_against_the_kernel_signature() {
    let Some(dev) = gpu() else { return };
    let module = Module::from_ptx(&dev, TEST_PTX).unwrap();
    let d = quiet();

    // A kernel without parameters runs (nothing to check, nothing to serve).
    let report = launch(&module.kernel("no_params").unwrap(), &Launch::default(), &d, &[]).unwrap();
    assert_eq!(report.calls, 0);

    let echo = module.kernel("desc_echo").unwrap();
    if echo.param_sizes().is_none() {
        skipped("the driver does not report parameter sizes (CUDA < 12.4)");
        return;
    }
    let e = launch(&echo, &Launch::default(), &d, &[]).unwrap_err();
    assert!(matches!(e, CudaError::KernelSignature { .. }), "{e}");
    assert!(e.to_string().contains("3 parameters"), "{e}");
    let e = launch(&echo, &Launch::default(), &d, &[KernelArg::U64(1), KernelArg::Ptr(0)]).unwrap_err();
    assert!(e.to_string().contains("parameter 1 is 4 bytes"), "{e}");
    let e = launch(&module.kernel("u64_first").unwrap(), &Launch::default(), &d, &[]).unwrap_err();
    assert!(e.to_string().contains("first parameter is 8 bytes"), "{e}");

    // Bad launch configurations are refused before anything runs.
    let e = launch(
        &echo,
        &Launch {
            grid: (0, 1, 1),
            ..Launch::default()
        },
        &d,
        &[KernelArg::U32(0), KernelArg::Ptr(0)],
    )
    .unwrap_err();
    assert!(matches!(e, CudaError::InvalidConfig { .. }), "{e}");
    // Too many threads per block: refused before the launch, naming the
    // kernel's limit and its registers; the context survives.
    let out = PinnedBuffer::new(&dev, 7 * 8).unwrap();
    let e = launch(
        &echo,
        &Launch {
            block: (4096, 1, 1),
            ..Launch::default()
        },
        &d,
        &[KernelArg::U32(0), KernelArg::Ptr(out.device_ptr())],
    )
    .unwrap_err();
    let limits = echo.resources().unwrap();
    match &e {
        CudaError::BlockTooLarge {
            kernel,
            threads,
            max_threads,
            registers,
        } => {
            assert_eq!((kernel.as_str(), *threads), ("desc_echo", 4096));
            assert_eq!(
                (*max_threads, *registers),
                (limits.max_threads_per_block, limits.registers)
            );
        }
        other => panic!("expected BlockTooLarge, got {other}"),
    }
    assert!(!e.is_context_lost());
    assert!(
        CudaRegion::new(&dev, 1).unwrap().is_quiescent().unwrap(),
        "the context still works"
    );
}

#[test]
fn garbage_ptx_is_rejected_with_a_clear_message() {
    let Some(dev) = gpu() else { return };
    for text in ["", "hello world", "\u{7f}ELF\u{2}\u{1}", "// just a comment\n"] {
        let e = Module::from_ptx(&dev, text).unwrap_err();
        assert!(matches!(e, CudaError::NotPtx { .. }), "{text:?}: {e}");
        assert!(e.to_string().contains("not PTX text"), "{e}");
    }
    // Looks like PTX, is not: the driver's JIT rejects it.
    let e = Module::from_ptx(
        &dev,
        ".version 7.8\n.target sm_90\n.address_size 64\nthis is not ptx;\n",
    )
    .unwrap_err();
    match &e {
        CudaError::InvalidPtx { name, .. } => assert!(name.starts_with("CUDA_ERROR_"), "{e}"),
        other => panic!("expected InvalidPtx, got {other:?}"),
    }
    assert!(e.to_string().contains("rejected the PTX module"), "{e}");
    eprintln!("{e}");
    // A PTX version newer than any driver knows.
    let e = Module::from_ptx(&dev, ".version 99.9\n.target sm_90\n.address_size 64\n").unwrap_err();
    assert!(matches!(e, CudaError::InvalidPtx { .. }), "{e}");
    eprintln!("{e}");
    // A file that does not exist.
    let e = Module::from_ptx_file(&dev, "/nonexistent/kernels.ptx").unwrap_err();
    assert!(matches!(e, CudaError::Io { .. }), "{e}");
    // A cubin header (ELF64, EM_CUDA) over garbage, and a fatbin's magic
    // over garbage: refused before the driver, which trusts their sizes
    // (it crashed the process on these very bytes), naming the kind of
    // image; the context stays usable (the PTX module below loads).
    let mut cubin = vec![0xa5u8; 4096];
    cubin[..6].copy_from_slice(b"\x7fELF\x02\x01");
    cubin[18..20].copy_from_slice(&190u16.to_le_bytes());
    let mut fatbin = vec![0xa5u8; 4096];
    fatbin[..4].copy_from_slice(&[0x50, 0xED, 0x55, 0xBA]);
    for (bytes, kind) in [(&cubin, "cubin"), (&fatbin, "fatbin")] {
        let e = Module::from_image(&dev, bytes).unwrap_err();
        assert!(
            matches!(&e, CudaError::BadImage { kind: k, .. } if *k == kind),
            "{kind}: {e:?}"
        );
        eprintln!("{e}");
    }
    let module = Module::from_image(
        &dev,
        b".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n",
    )
    .expect("PTX through from_image");
    assert_eq!(module.entries(), ["k"]);
}

#[test]
fn missing_kernel_is_named() {
    let Some(dev) = gpu() else { return };
    let module = Module::from_ptx(&dev, TEST_PTX).unwrap();
    let e = module.kernel("rpc_nope_kernel").unwrap_err();
    assert!(matches!(e, CudaError::KernelNotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("kernel `rpc_nope_kernel` not found in module"), "{msg}");
    assert!(msg.contains("desc_echo"), "the message lists the entry points: {msg}");
    // A name with a NUL byte cannot name a kernel.
    assert!(matches!(
        module.kernel("with\0nul"),
        Err(CudaError::KernelNotFound { .. })
    ));
}

#[test]
fn pinned_buffer_round_trip() {
    let Some(dev) = gpu() else { return };
    let mut buf = PinnedBuffer::new(&dev, 100).unwrap();
    assert_eq!(buf.len(), 100);
    assert_eq!(buf.host_ptr() as usize % 4096, 0, "pinned allocations are page-aligned");
    assert_ne!(buf.device_ptr(), 0);
    // SAFETY: no kernel uses the buffer.
    unsafe {
        assert!(buf.as_slice().iter().all(|&b| b == 0));
        buf.as_mut_slice()[..8].copy_from_slice(&42u64.to_le_bytes());
        assert_eq!(buf.read_u64(0), 42);
    }
    assert!(PinnedBuffer::new(&dev, 0).is_err());
    assert!(CudaRegion::new(&dev, 0).is_err());
}

/// The RPC round trip on a GPU. Expects, in the PTX file named by
/// `GPU_RPC_TEST_PTX`:
///
/// ```text
/// #[no_mangle]
/// pub unsafe extern "ptx-kernel" fn rpc_noop_kernel(desc: ClientDesc, iters: u32, out: *mut u64)
/// ```
///
/// Each thread builds its `Client` with `Client::from_desc(&desc)`, starts
/// with `x = its global thread id` (`blockIdx.x * blockDim.x + threadIdx.x`,
/// 1-D launches), calls `x = client.noop(x).unwrap()` `iters` times (the host
/// answers `x + 1`) and writes the final `x` to `out[global id]`. So
/// `out[i] == i + iters` for every thread.
#[test]
fn noop_kernel_serves_every_call() {
    let Some(dev) = gpu() else { return };
    let Some(ptx) = rpc_ptx() else { return };
    let module = Module::from_ptx(&dev, &ptx).unwrap();
    let kernel = module.kernel("rpc_noop_kernel").unwrap();
    let iters = 100u32;
    // (blocks, threads per block, ports, server threads): one warp on one
    // port; full warps with more ports than warps; more warps than ports
    // (contention) on several server threads; partial warps.
    for (blocks, threads, ports, servers) in [
        (1u32, 32u32, 1u32, 1usize),
        (4, 64, 16, 2),
        (8, 128, 8, 3),
        (2, 48, 4, 2),
    ] {
        let total = (blocks * threads) as usize;
        let warps = (blocks * threads.div_ceil(32)) as u64;
        let region = CudaRegion::new(&dev, ports).unwrap();
        let out = PinnedBuffer::new(&dev, total * 8).unwrap();
        let d = quiet();
        let cfg = Launch {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            server_threads: servers,
            ..Launch::default()
        };
        let report = launch_with_region(
            &region,
            &kernel,
            &cfg,
            &d,
            &[KernelArg::U32(iters), KernelArg::Ptr(out.device_ptr())],
        )
        .unwrap_or_else(|e| panic!("{blocks}x{threads} on {ports} ports: {e}"));
        assert_eq!(report.errors, 0, "{:?}", d.errors());
        assert!(
            report.calls >= warps * iters as u64 && report.calls <= total as u64 * iters as u64,
            "{} calls for {warps} warps / {total} threads x {iters}",
            report.calls
        );
        for i in 0..total {
            // SAFETY: the launch has returned; the kernel is over.
            let got = unsafe { out.read_u64(i) };
            assert_eq!(got, i as u64 + iters as u64, "thread {i} of {blocks}x{threads}");
        }
        assert!(
            region.is_quiescent().unwrap(),
            "{blocks}x{threads}: every port idle and unlocked after the run"
        );
        eprintln!(
            "{blocks}x{threads} threads, {ports} ports, {servers} server threads: {} calls in {:?} (kernel {:?})",
            report.calls, report.elapsed, report.kernel_time
        );
    }
    // `launch` with its own region (ports clamped to the warps).
    let out = PinnedBuffer::new(&dev, 64 * 8).unwrap();
    let cfg = Launch {
        grid: (1, 1, 1),
        block: (64, 1, 1),
        ..Launch::default()
    };
    let report = launch(
        &kernel,
        &cfg,
        &quiet(),
        &[KernelArg::U32(iters), KernelArg::Ptr(out.device_ptr())],
    )
    .unwrap();
    assert_eq!(report.port_count, 2);
    // SAFETY: the launch has returned; the kernel is over.
    assert_eq!(unsafe { out.read_u64(63) }, 63 + iters as u64);
}

/// Kernels the caller launches with `cudarc` (its context, module, streams
/// and `launch_builder`), served by one `Serve`: two streams, launches of
/// different shapes (a partial warp included), every thread's result checked
/// in `cudarc` device memory.
#[test]
fn serve_runs_kernels_launched_with_cudarc() {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    use cudarc::nvrtc::Ptx;
    use rpc_runtime::cuda::{Serve, ServeConfig};
    let Some(dev) = gpu() else { return };
    let Some(ptx) = rpc_ptx() else { return };
    let ctx = dev.context().clone();
    let module = ctx.load_module(Ptx::from_src(ptx)).unwrap();
    let f = module.load_function("rpc_noop_kernel").unwrap();
    let d = std::sync::Arc::new(quiet());
    let cfg = ServeConfig {
        port_count: 64,
        server_threads: 2,
    };
    let rpc = Serve::start(&ctx, d.clone(), &cfg).unwrap();
    assert_eq!(rpc.desc().port_count, 64);
    let iters = 50u32;
    let shapes = [(4u32, 96u32), (3, 33)];
    let streams = [ctx.new_stream().unwrap(), ctx.new_stream().unwrap()];
    let mut outs = Vec::new();
    for (stream, &(blocks, threads)) in streams.iter().zip(&shapes) {
        let mut out = stream.alloc_zeros::<u64>((blocks * threads) as usize).unwrap();
        let mut launch = stream.launch_builder(&f);
        launch.arg(rpc.desc()).arg(&iters).arg(&mut out);
        let lc = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (descriptor by value, u32, pointer to one u64 per thread),
        // as the kernel declares.
        unsafe { launch.launch(lc) }.unwrap();
        outs.push(out);
    }
    for (stream, out) in streams.iter().zip(&outs) {
        stream.synchronize().unwrap();
        let got = stream.clone_dtoh(out).unwrap();
        for (i, &x) in got.iter().enumerate() {
            assert_eq!(x, i as u64 + iters as u64, "thread {i}");
        }
    }
    let busy = rpc.region().busy_ports().unwrap();
    assert!(busy.is_empty(), "{busy:?}");
    let report = rpc.finish().unwrap();
    let warps: u64 = shapes.iter().map(|&(b, t)| (b * t.div_ceil(32)) as u64).sum();
    assert_eq!(report.errors, 0, "{:?}", d.errors());
    assert_eq!(
        report.calls,
        warps * iters as u64,
        "one warp-call per warp and iteration"
    );
    assert_eq!(report.port_count, 64);
}

/// `DeviceBuffer` both ways: host to device, device to host.
#[test]
fn device_buffer_copies_both_ways() {
    use rpc_runtime::cuda::DeviceBuffer;
    let Some(dev) = gpu() else { return };
    let buf = DeviceBuffer::new(&dev, 1000).unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![0u8; 1000], "zeroed");
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    buf.copy_from(&data[..999]).unwrap();
    let mut want = data.clone();
    want[999] = 0;
    assert_eq!(buf.to_vec().unwrap(), want);
    let pinned = PinnedBuffer::new(&dev, 1000).unwrap();
    buf.copy_to(&pinned).unwrap();
    // SAFETY: no kernel uses the buffer.
    assert_eq!(unsafe { pinned.as_slice() }, &want[..]);
    let e = buf.copy_from(&[0u8; 1001]).unwrap_err();
    assert!(
        e.to_string().contains("1001 bytes into a 1000-byte device buffer"),
        "{e}"
    );
}

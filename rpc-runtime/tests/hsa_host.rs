//! What of the HSA backend runs without an AMD GPU: code-object checks (on
//! synthetic headers and, when one has been built, on a real code object),
//! AQL packet encoding and kernel-argument layout.
#![cfg(feature = "hsa")]

mod support;

use std::mem::{offset_of, size_of};
use std::path::PathBuf;

use rpc_runtime::hsa::aql::{self, KernelDispatchPacket};
use rpc_runtime::hsa::{dispatch_packet, is_code_object, kernarg_segment, CodeObject, HsaError, KernelArg, Launch};

fn elf_header(class: u8, osabi: u8, machine: u16, e_type: u16) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = class;
    h[5] = 1;
    h[6] = 1;
    h[7] = osabi;
    h[16..18].copy_from_slice(&e_type.to_le_bytes());
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    h
}

#[test]
fn code_object_header_checks() {
    assert!(is_code_object(&elf_header(2, 64, 224, 3)));
    let cases: [(Vec<u8>, &str); 7] = [
        (Vec::new(), "shorter than an ELF64 header"),
        (b".version 8.0\n.target sm_90\n".repeat(4), "no ELF magic"),
        (elf_header(1, 64, 224, 3), "not ELFCLASS64"),
        (elf_header(2, 0, 224, 3), "not ELFOSABI_AMDGPU_HSA (64)"),
        (elf_header(2, 64, 62, 3), "not EM_AMDGPU (224)"),
        (elf_header(2, 64, 224, 1), "not a shared object"),
        (elf_header(2, 64, 224, 3), "no section headers"),
    ];
    for (bytes, needle) in cases {
        let e = CodeObject::from_bytes(bytes.clone()).unwrap_err();
        assert!(matches!(e, HsaError::NotCodeObject { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with("gpu_rpc hsa: not an AMDGPU code object: "), "{text}");
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    assert!(!is_code_object(&elf_header(2, 0, 224, 3)));
}

/// A code object built by rpc-build: `$GPU_RPC_TEST_HSACO`, or the example
/// kernels as `cargo test -p rpc-build --test amdgcn_rpc` leaves them.
fn built_code_objects() -> Vec<(String, PathBuf)> {
    if let Ok(p) = std::env::var("GPU_RPC_TEST_HSACO") {
        return vec![("$GPU_RPC_TEST_HSACO".into(), PathBuf::from(p))];
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/gpu/kernels/target/device");
    ["gfx90a", "gfx942"]
        .iter()
        .map(|gfx| {
            (
                gfx.to_string(),
                root.join(gfx)
                    .join("amdgcn-amd-amdhsa/release/gpu_example_kernels.hsaco"),
            )
        })
        .filter(|(_, p)| p.is_file())
        .collect()
}

#[test]
fn real_code_object_lists_its_kernels() {
    let found = built_code_objects();
    if found.is_empty() {
        support::skipped(
            "no code object built yet (run `cargo test -p rpc-build --test amdgcn_rpc` with the device \
             toolchain, or set GPU_RPC_TEST_HSACO)",
        );
        return;
    }
    for (gfx, path) in found {
        let code = CodeObject::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(is_code_object(code.bytes()));
        for k in ["rpc_noop_kernel", "rpc_incr_kernel", "rpc_print_kernel", "hello_kernel"] {
            assert!(
                code.kernels().iter().any(|n| n == k),
                "{gfx}: {k} not in {:?}",
                code.kernels()
            );
        }
        if gfx.starts_with("gfx") {
            assert_eq!(code.processor(), Some(gfx.as_str()), "e_flags {:#x}", code.e_flags());
        }
        // Truncating the file breaks the section table: a clean error.
        let cut = CodeObject::from_bytes(code.bytes()[..200].to_vec()).unwrap_err();
        assert!(cut.to_string().contains("malformed ELF"), "{cut}");
    }
}

#[test]
fn dispatch_packet_layout_and_header() {
    assert_eq!(size_of::<KernelDispatchPacket>(), 64);
    assert_eq!(offset_of!(KernelDispatchPacket, grid_size_x), 12);
    assert_eq!(offset_of!(KernelDispatchPacket, kernel_object), 32);
    assert_eq!(offset_of!(KernelDispatchPacket, completion_signal), 56);
    let h = aql::kernel_dispatch_header();
    assert_eq!(h & 0xff, 2, "type KERNEL_DISPATCH");
    assert_eq!((h >> 8) & 1, 1, "barrier bit");
    assert_eq!((h >> 9) & 3, 2, "acquire fence: system scope");
    assert_eq!((h >> 11) & 3, 2, "release fence: system scope");
    assert_eq!(h, 0x1502);
    assert_eq!(aql::header_word(h, 1), 0x0001_1502);

    let l = Launch {
        grid: (3, 2, 1),
        block: (128, 2, 1),
        shared_mem_bytes: 256,
        ..Launch::default()
    };
    let p = dispatch_packet(&l, 0x7000, 0x8000, 0x9000, 32, 1024).unwrap();
    assert_eq!(p.header, 0, "the header is published separately, last");
    assert_eq!(p.setup, 2);
    assert_eq!(
        (p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z),
        (128, 2, 1)
    );
    assert_eq!((p.grid_size_x, p.grid_size_y, p.grid_size_z), (384, 4, 1));
    assert_eq!((p.private_segment_size, p.group_segment_size), (32, 1024 + 256));
    assert_eq!(
        (p.kernel_object, p.kernarg_address, p.completion_signal),
        (0x7000, 0x8000, 0x9000)
    );
    assert_eq!((p.reserved0, p.reserved2), (0, 0));
    assert_eq!(dispatch_packet(&Launch::default(), 1, 2, 3, 0, 0).unwrap().setup, 1);
    let three = Launch {
        grid: (1, 1, 4),
        ..Launch::default()
    };
    assert_eq!(dispatch_packet(&three, 1, 2, 3, 0, 0).unwrap().setup, 3);

    for bad in [
        Launch {
            grid: (0, 1, 1),
            ..Launch::default()
        },
        Launch {
            block: (70_000, 1, 1),
            ..Launch::default()
        },
        Launch {
            grid: (u32::MAX, 1, 1),
            block: (2, 1, 1),
            ..Launch::default()
        },
    ] {
        let e = dispatch_packet(&bad, 1, 2, 3, 0, 0).unwrap_err();
        assert!(e.to_string().starts_with("gpu_rpc hsa: invalid launch:"), "{e}");
    }
}

#[test]
fn kernargs_explicit_layout() {
    // rpc_noop_kernel(desc: *const ClientDesc, iters: u32, out: *mut u64): the
    // code object metadata says 0: global_buffer 8, 8: by_value 4,
    // 16: global_buffer 8, segment 24.
    let args = [KernelArg::U32(0xdead_beef), KernelArg::Ptr(0x1234_5678_9abc)];
    let k = kernarg_segment(0x10_0000, &args, 24, &Launch::default(), 0).unwrap();
    assert_eq!(k.len(), 24);
    assert_eq!(k[0..8], 0x10_0000u64.to_le_bytes());
    assert_eq!(k[8..12], 0xdead_beefu32.to_le_bytes());
    assert_eq!(k[12..16], [0; 4], "padding");
    assert_eq!(k[16..24], 0x1234_5678_9abcu64.to_le_bytes());

    let mixed = [
        KernelArg::I32(-2),
        KernelArg::F32(1.5),
        KernelArg::F64(2.5),
        KernelArg::I64(-3),
    ];
    let k = kernarg_segment(8, &mixed, 32, &Launch::default(), 0).unwrap();
    assert_eq!(k[8..12], (-2i32).to_le_bytes());
    assert_eq!(k[12..16], 1.5f32.to_le_bytes());
    assert_eq!(k[16..24], 2.5f64.to_le_bytes());
    assert_eq!(k[24..32], (-3i64).to_le_bytes());

    // A segment smaller than the explicit arguments: refused.
    let e = kernarg_segment(8, &args, 16, &Launch::default(), 0).unwrap_err();
    assert!(
        e.to_string()
            .contains("argument segment is 16 bytes, the launch passes 24"),
        "{e}"
    );
}

#[test]
fn kernargs_hidden_v5_block() {
    // hello_kernel(desc: *const ClientDesc): metadata says segment 264, hidden
    // block counts at 8/12/16, group sizes at 20/22/24, remainders at
    // 26/28/30, grid dims at 72, queue_ptr at 208.
    let l = Launch {
        grid: (5, 3, 1),
        block: (64, 2, 1),
        ..Launch::default()
    };
    let k = kernarg_segment(0x4000, &[], 264, &l, 0xfeed_f00d).unwrap();
    assert_eq!(k.len(), 264);
    assert_eq!(k[0..8], 0x4000u64.to_le_bytes());
    let u32_at = |o: usize| u32::from_le_bytes(k[o..o + 4].try_into().unwrap());
    let u16_at = |o: usize| u16::from_le_bytes(k[o..o + 2].try_into().unwrap());
    assert_eq!((u32_at(8), u32_at(12), u32_at(16)), (5, 3, 1));
    assert_eq!((u16_at(20), u16_at(22), u16_at(24)), (64, 2, 1));
    assert_eq!((u16_at(26), u16_at(28), u16_at(30)), (0, 0, 0));
    assert_eq!(u16_at(72), 2);
    assert_eq!(k[208..216], 0xfeed_f00du64.to_le_bytes());
    assert!(k[48..72].iter().all(|&b| b == 0), "global offsets stay 0");
    assert!(k[88..208].iter().all(|&b| b == 0), "hostcall/heap/queue fields stay 0");
}

//! The generated CUDA C++ headers compile: `CppDemoRpc::cuda_header()`,
//! `StdRpc::cuda_header()` and the kernels in `cpp/` that use them, with clang-22 for sm_90 (no
//! CUDA headers, no GPU), then ptxas where it is installed (which also
//! checks the header's inline PTX). The layouts are checked by the
//! `static_assert`s the header carries (C++ struct size and offsets, wire
//! sizes against the Rust side). The kernel runs on a GPU in
//! `src/bin/cpp_nvrtc.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_example_services::cpp_demo::{self, CppDemoRpc};

/// Write the headers the kernels include into a fresh directory.
fn headers(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-rpc-cpp-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cpp_demo.cuh"), CppDemoRpc::cuda_header()).unwrap();
    std::fs::write(dir.join("cpp_demo_v0.cuh"), cpp_demo::v0::CppDemoRpc::cuda_header()).unwrap();
    std::fs::write(dir.join("std.cuh"), gpu_rpc::services::StdRpc::cuda_header()).unwrap();
    dir
}

fn clang() -> Option<PathBuf> {
    let c = PathBuf::from("/usr/lib/llvm-22/bin/clang");
    if c.exists() {
        return Some(c);
    }
    which("clang-22")
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// clang-22, or `None` after saying why the test cannot run (an error when
/// `GPU_RPC_REQUIRE_CLANG` is set, as CI sets it).
fn clang_or_skip(test: &str) -> Option<PathBuf> {
    match clang() {
        Some(c) => Some(c),
        None if std::env::var_os("GPU_RPC_REQUIRE_CLANG").is_some() => {
            panic!("{test}: clang-22 not found and GPU_RPC_REQUIRE_CLANG is set")
        }
        None => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {test}: clang-22 not found (apt install clang-22)"
            );
            None
        }
    }
}

/// clang compiling CUDA C++ device code for sm_90 without a CUDA
/// installation: no CUDA headers or libraries, the PTX version named.
fn clang_sm_90(clang: &Path) -> Command {
    let mut c = Command::new(clang);
    c.args([
        "-x",
        "cuda",
        "--cuda-device-only",
        "-nocudainc",
        "-nocudalib",
        "--cuda-gpu-arch=sm_90",
    ])
    .args(["-Xclang", "-target-feature", "-Xclang", "+ptx80", "-std=c++17"]);
    c
}

/// Compile `cpp/<kernel>.cu` for sm_90 to PTX, then assemble it with ptxas if
/// there is one; returns the PTX.
fn compile(clang: &Path, dir: &Path, kernel: &str) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("cpp")
        .join(format!("{kernel}.cu"));
    let ptx = dir.join(format!("{kernel}.ptx"));
    let out = clang_sm_90(clang)
        .args([
            "-O2",
            "-Wall",
            "-Werror",
            "-include",
            "__clang_cuda_builtin_vars.h",
            "-S",
            "-I",
        ])
        .arg(dir)
        .arg(&src)
        .arg("-o")
        .arg(&ptx)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "clang failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(ptxas) = rpc_build::footprint::find_ptxas() {
        let out = Command::new(ptxas)
            .args(["-arch=sm_90", "-v", "-o"])
            .arg(dir.join(format!("{kernel}.cubin")))
            .arg(&ptx)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ptxas failed on {kernel}.ptx:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The footprint, for the log: registers, stack, spills.
        use std::io::Write;
        let info = String::from_utf8_lossy(&out.stderr);
        for line in info
            .lines()
            .filter(|l| l.contains("registers") || l.contains("stack frame"))
        {
            let _ = writeln!(std::io::stderr(), "{kernel}: {}", line.trim());
        }
    }
    std::fs::read_to_string(ptx).unwrap()
}

#[test]
fn generated_headers_compile_for_sm_90() {
    let Some(clang) = clang_or_skip("generated_headers_compile_for_sm_90") else {
        return;
    };
    let dir = headers("compile");
    let ptx = compile(&clang, &dir, "cpp_demo");
    assert!(ptx.contains(".entry cpp_demo_kernel"), "{ptx}");
    // The protocol's warp operations are there: grouping, voting, the fences.
    for op in [
        "match.any.sync.b64",
        "vote.sync.ballot.b32",
        "shfl.sync.idx.b32",
        "fence.acq_rel.sys",
        "bar.warp.sync",
    ] {
        assert!(ptx.contains(op), "no {op} in the kernel");
    }
    let ptx = compile(&clang, &dir, "cpp_demo_v0");
    assert!(ptx.contains(".entry cpp_demo_v0_kernel"));
    let ptx = compile(&clang, &dir, "std_demo");
    assert!(ptx.contains(".entry std_demo_kernel"));
    let _ = std::fs::remove_dir_all(dir);
}

/// A wrong layout on the C++ side is a compile error, not a misread call:
/// the header's `static_assert`s compare against the Rust numbers.
#[test]
fn a_mismatched_layout_does_not_compile() {
    let Some(clang) = clang_or_skip("a_mismatched_layout_does_not_compile") else {
        return;
    };
    let dir = headers("mismatch");
    let header = CppDemoRpc::cuda_header().replace("  double value;", "  float value;");
    std::fs::write(dir.join("bad.cuh"), header).unwrap();
    std::fs::write(dir.join("bad.cu"), "#include \"bad.cuh\"\n").unwrap();
    let out = clang_sm_90(&clang)
        .arg("-fsyntax-only")
        .arg(dir.join("bad.cu"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("gpu_rpc: Sample"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_header_names_the_rust_numbers() {
    let h = CppDemoRpc::cuda_header();
    for d in [
        CppDemoRpc::SCALE,
        CppDemoRpc::RECORD,
        CppDemoRpc::CHECKSUM,
        CppDemoRpc::NOTE,
    ] {
        assert!(
            h.contains(&format!("{:#x}u, {:#010x}u", d.opcode, d.signature)),
            "{}",
            d.method
        );
    }
    assert!(h.contains("struct CppDemoClient {"));
    assert!(h.contains("struct Sample {"));
    // The tuple result has no C++ form: left out, with the reason.
    assert!(
        h.contains("`pair` is not offered in C++: the return type `(u32, u32)` has no C++ form"),
        "{h}"
    );
    assert!(!h.contains("try_pair"));
    // The old version differs in the signature only.
    let old = cpp_demo::v0::CppDemoRpc::SCALE;
    assert_eq!(old.opcode, CppDemoRpc::SCALE.opcode);
    assert_ne!(old.signature, CppDemoRpc::SCALE.signature);
}

/// Which derived structs have a C++ form: those whose fields all have one
/// with the Rust layout (not `Option`/`Result`/`()`), non-generic, with
/// fields.
#[test]
fn derived_structs_have_a_cpp_form_when_their_layout_can_match() {
    use gpu_example_services::cpp_demo::Sample;
    use gpu_rpc::Wire;

    #[derive(Wire, Clone, Copy)]
    #[repr(C)]
    struct Nested {
        s: Sample,
        a: [u16; 2],
        c: char,
    }
    #[derive(Wire, Clone, Copy)]
    #[repr(C)]
    struct WithOption {
        a: Option<u32>,
    }
    #[derive(Wire, Clone, Copy)]
    #[repr(C)]
    struct Generic<T> {
        t: T,
    }
    #[derive(Wire, Clone, Copy)]
    #[repr(C)]
    struct Empty;

    assert!(<Nested as Wire>::CPP.is_some());
    assert!(<WithOption as Wire>::CPP.is_none());
    assert!(<Generic<u32> as Wire>::CPP.is_none());
    assert!(<Empty as Wire>::CPP.is_none());
    assert!(<Option<Nested> as Wire>::CPP.is_some());
    assert!(<[u128; 2] as Wire>::CPP.is_none());
}

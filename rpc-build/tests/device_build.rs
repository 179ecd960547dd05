//! Builds `tests/fixtures/atomics-kernel` for nvptx64 and amdgcn and checks how the
//! memory-model operations the RPC protocol relies on come out.
//!
//! When no toolchain is found the tests print why and return (they pass): hosts
//! without a GPU toolchain can run the rest of the suite.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rpc_build::{Artifact, BuildError, DeviceBuild, Target, Toolchain};

const KERNEL: &str = "rpc_fixture_kernel";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/atomics-kernel")
}

/// Builds the fixture, or returns `None` (after saying why) when no toolchain exists.
fn build(target: Target) -> Option<Artifact> {
    let toolchain = match Toolchain::detect(&target) {
        Ok(tc) => tc,
        Err(e @ BuildError::ToolchainNotFound { .. }) => {
            eprintln!("SKIPPED: {target}: no device toolchain:\n{e}");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    eprintln!("{target}: toolchain {toolchain}");
    let start = Instant::now();
    let artifact = DeviceBuild::new(fixture())
        .target(target)
        .toolchain(toolchain)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{target}: built {} with {} in {:.1?}",
        artifact.path().display(),
        artifact.linker(),
        start.elapsed()
    );
    Some(artifact)
}

#[test]
fn nvptx_sm90_has_system_scope_acquire_release() {
    let Some(artifact) = build(Target::Nvptx { sm: 90 }) else {
        return;
    };
    assert_eq!(artifact.path().extension().unwrap(), "ptx");
    let ptx = std::fs::read_to_string(artifact.path()).unwrap();
    for needle in [
        ".target sm_90".to_owned(),
        format!(".visible .entry {KERNEL}("),
        "ld.acquire.sys".to_owned(),
        "st.release.sys".to_owned(),
    ] {
        assert!(ptx.contains(&needle), "no `{needle}` in\n{ptx}");
    }
    assert!(
        ptx.contains("fence.sc.sys") || ptx.contains("fence.acq_rel.sys"),
        "no system-scope fence in\n{ptx}"
    );
    // fetch_or(Relaxed) is a plain (GPU-scope) `atom`; the protocol's explicit
    // fence(Acquire) right after it must survive as a system-scope fence.
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let atom = lines
        .iter()
        .position(|l| l.starts_with("atom.") && l.contains(".or."))
        .unwrap_or_else(|| panic!("no atom.*.or in\n{ptx}"));
    assert!(
        lines[atom + 1].starts_with("fence.acq_rel.sys") || lines[atom + 1].starts_with("fence.sc.sys"),
        "fetch_or not followed by a system-scope fence:\n{ptx}"
    );
    // Only the kernel is exported; compiler_builtins was internalized away.
    let visible: Vec<&&str> = lines.iter().filter(|l| l.starts_with(".visible")).collect();
    assert_eq!(visible.len(), 1, "{visible:?}");
    assert!(artifact
        .sources()
        .iter()
        .any(|p| p.ends_with("atomics-kernel/src/lib.rs")));
    // rustc's warning about rpc-build's own `+ptx80` flag is not passed on.
    assert_eq!(artifact.warnings(), [] as [String; 0]);
}

/// The device crate's warnings survive a successful build, and its errors
/// name files by absolute path (the user's `cargo build` runs elsewhere).
#[test]
fn device_diagnostics_reach_the_user_with_absolute_paths() {
    let target = Target::Nvptx { sm: 90 };
    let toolchain = match Toolchain::detect(&target) {
        Ok(tc) => tc,
        Err(e @ BuildError::ToolchainNotFound { .. }) => {
            eprintln!("SKIPPED: {target}: no device toolchain:\n{e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let lib = fixture().canonicalize().unwrap().join("src/lib.rs");
    let with = |feature: &str| {
        DeviceBuild::new(fixture())
            .target(target)
            .toolchain(toolchain.clone())
            .feature(feature)
            .build()
    };
    let warned = with("warn").unwrap_or_else(|e| panic!("{e}"));
    let [warning] = warned.warnings() else {
        panic!("expected one warning: {:?}", warned.warnings());
    };
    assert!(warning.contains("unused variable: `unused_on_purpose`"), "{warning}");
    assert!(warning.contains(&format!("--> {}:", lib.display())), "{warning}");
    let err = with("broken").unwrap_err().to_string();
    assert!(err.contains("cannot find value `undefined_on_purpose`"), "{err}");
    assert!(err.contains(&format!("--> {}:", lib.display())), "{err}");
}

#[test]
fn nvptx_rejects_pre_volta() {
    let err = DeviceBuild::new(fixture())
        .target(Target::Nvptx { sm: 61 })
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::UnsupportedTarget(_)), "{err}");
}

fn objdump(path: &Path, artifact: &Artifact) -> Option<String> {
    let tool = artifact
        .toolchain()
        .llvm_bin()
        .map(|b| b.join("llvm-objdump"))
        .filter(|p| p.is_file())
        .or_else(|| Some(PathBuf::from("/usr/lib/llvm-22/bin/llvm-objdump")).filter(|p| p.is_file()));
    let Some(tool) = tool else {
        eprintln!("llvm-objdump not found: not disassembling {}", path.display());
        return None;
    };
    let out = Command::new(tool).arg("-d").arg(path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap())
}

/// Checks the code object and returns its disassembly (when llvm-objdump exists).
fn check_amdgcn(gfx: &'static str, e_flags_mach: u32) -> Option<(Artifact, String)> {
    let artifact = build(Target::Amdgcn { gfx })?;
    assert_eq!(artifact.path().extension().unwrap(), "hsaco");
    let elf = std::fs::read(artifact.path()).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!(elf[4], 2, "ELFCLASS64");
    assert_eq!(
        u16::from_le_bytes([elf[18], elf[19]]),
        224,
        "e_machine must be EM_AMDGPU"
    );
    let e_flags = u32::from_le_bytes([elf[48], elf[49], elf[50], elf[51]]);
    assert_eq!(
        e_flags & 0xff,
        e_flags_mach,
        "EF_AMDGPU_MACH for {gfx}: e_flags {e_flags:#x}"
    );
    let asm = objdump(artifact.path(), &artifact)?;
    assert!(asm.contains(&format!("<{KERNEL}>:")), "{asm}");
    Some((artifact, asm))
}

/// How one AMDGPU generation spells system-scope ordering (LLVM's AMDGPU memory model).
struct SystemScope {
    /// Suffix of an acquire (system-scope) load.
    acquire_load: &'static str,
    /// Instructions that follow an acquire: invalidate the caches.
    acquire: &'static [&'static str],
    /// The instruction that precedes a release: write back L2.
    release: &'static str,
}

/// The instructions of the disassembly, without addresses, encodings or comments.
fn instructions(asm: &str) -> Vec<String> {
    asm.lines()
        .filter(|l| l.starts_with('\t'))
        .map(|l| {
            l.split("//")
                .next()
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn check_system_scope(asm: &str, scope: &SystemScope) {
    let insns = instructions(asm);
    let near = |from: usize, to: usize, what: &str| {
        insns[from.min(insns.len())..to.min(insns.len())]
            .iter()
            .any(|i| i == what)
    };
    // inbox.load(Acquire): a system-scope load, then the cache invalidations.
    let load = insns
        .iter()
        .position(|i| i.starts_with("global_load_dword ") && i.ends_with(scope.acquire_load))
        .unwrap_or_else(|| panic!("no `global_load_dword .. {}` in\n{asm}", scope.acquire_load));
    for inv in scope.acquire {
        assert!(
            near(load + 1, load + 5, inv),
            "acquire load not followed by `{inv}`:\n{asm}"
        );
    }
    // fence(SeqCst): write back (release half) then invalidate (acquire half).
    let wb = insns
        .iter()
        .position(|i| i == scope.release)
        .unwrap_or_else(|| panic!("no `{}` in\n{asm}", scope.release));
    assert!(
        near(wb + 1, wb + 3, scope.acquire[0]),
        "SeqCst fence incomplete:\n{asm}"
    );
    // fetch_or(Relaxed) + fence(Acquire): an atomic, then invalidation before the next store.
    let rmw = insns
        .iter()
        .position(|i| i.starts_with("global_atomic_"))
        .unwrap_or_else(|| panic!("no global atomic in\n{asm}"));
    let store = insns
        .iter()
        .rposition(|i| i.starts_with("global_store_dword "))
        .unwrap_or_else(|| panic!("no global store in\n{asm}"));
    assert!(
        near(rmw + 1, store, scope.acquire[0]),
        "no acquire after the read-modify-write:\n{asm}"
    );
    // outbox.store(Release): write back L2 and wait, then the store.
    assert!(
        near(store.saturating_sub(3), store, scope.release)
            && near(store.saturating_sub(3), store, "s_waitcnt vmcnt(0)"),
        "release store not preceded by `{}` + `s_waitcnt vmcnt(0)`:\n{asm}",
        scope.release
    );
}

#[test]
fn amdgcn_gfx90a_code_object() {
    let Some((_, asm)) = check_amdgcn("gfx90a", 0x3f) else {
        return;
    };
    // gfx90a: acquire loads are `glc`; acquire = buffer_invl2 + buffer_wbinvl1_vol;
    // release = buffer_wbl2.
    check_system_scope(
        &asm,
        &SystemScope {
            acquire_load: "glc",
            acquire: &["buffer_invl2", "buffer_wbinvl1_vol"],
            release: "buffer_wbl2",
        },
    );
}

#[test]
fn amdgcn_gfx942_code_object() {
    let Some((_, asm)) = check_amdgcn("gfx942", 0x4c) else {
        return;
    };
    // gfx942: system scope is `sc0 sc1` on the instructions themselves.
    check_system_scope(
        &asm,
        &SystemScope {
            acquire_load: "sc0 sc1",
            acquire: &["buffer_inv sc0 sc1"],
            release: "buffer_wbl2 sc0 sc1",
        },
    );
    let insns = instructions(&asm);
    assert!(
        insns
            .iter()
            .any(|i| i.starts_with("global_atomic_") && i.ends_with("sc0 sc1")),
        "read-modify-write is not system scope:\n{asm}"
    );
}

//! Builds the example kernels crate (`examples/gpu/kernels`: the protocol core, the
//! lanes layer and the `#[gpu_rpc]`-generated stubs) for `amdgcn-amd-amdhsa` (gfx90a
//! and gfx942), disassembles the code object with `llvm-objdump` and checks what the
//! RPC protocol relies on:
//!
//! * the kernels exist, with their `<name>.kd` kernel descriptors;
//! * mailbox words move with system-scope loads/stores (`glc` on gfx90a, `sc0 sc1` on
//!   gfx942), the release fence (`buffer_wbl2` + `s_waitcnt vmcnt(0)`) sits before the
//!   outbox flip, the acquire fence (cache invalidation) after the inbox wait and
//!   after the lock's read-modify-write;
//! * the lanes layer lowers: `v_mbcnt_lo/hi` (lane id), `v_readlane_b32` (broadcast
//!   from the first lane of the mask), `s_sleep 1` (backoff), `s_endpgm` (halt);
//! * the kernel ABI the HSA host backend marshals for: the descriptor pointer is an
//!   8-byte `global_buffer` at offset 0, `rpc_noop_kernel`'s segment is 24 bytes.
//!
//! When no toolchain is found the tests print why and return (they pass). The code
//! objects stay in `examples/gpu/kernels/target/device/<gfx>/`, where
//! `rpc-runtime`'s `hsa_host` test picks them up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rpc_build::{Artifact, BuildError, DeviceBuild, Target, Toolchain};

const KERNELS: [&str; 4] = ["rpc_noop_kernel", "rpc_incr_kernel", "rpc_print_kernel", "hello_kernel"];

fn kernels_crate() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpu/kernels")
}

fn build(gfx: &'static str) -> Option<Artifact> {
    let target = Target::Amdgcn { gfx };
    let toolchain = match Toolchain::detect(&target) {
        Ok(tc) => tc,
        Err(e @ BuildError::ToolchainNotFound { .. }) => {
            eprintln!("SKIPPED: {target}: no device toolchain:\n{e}");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let start = Instant::now();
    let artifact = DeviceBuild::new(kernels_crate())
        .target(target)
        .toolchain(toolchain)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{target}: built {} in {:.1?}",
        artifact.path().display(),
        start.elapsed()
    );
    Some(artifact)
}

fn llvm_tool(artifact: &Artifact, name: &str) -> Option<PathBuf> {
    artifact
        .toolchain()
        .llvm_bin()
        .map(|b| b.join(name))
        .filter(|p| p.is_file())
        .or_else(|| Some(PathBuf::from("/usr/lib/llvm-22/bin").join(name)).filter(|p| p.is_file()))
}

fn run(tool: &Path, args: &[&str], file: &Path) -> String {
    let out = Command::new(tool).args(args).arg(file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `name`'s instructions (without addresses, encodings, comments; spaces collapsed).
fn function(asm: &str, name_part: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in asm.lines() {
        if line.ends_with(">:") {
            inside = line.contains(name_part);
            continue;
        }
        if inside && line.starts_with('\t') {
            let insn = line
                .split("//")
                .next()
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            // `...` is objdump's mark for zero padding between functions.
            if !insn.is_empty() && insn != "..." {
                out.push(insn);
            }
        }
    }
    out
}

/// How one generation spells system scope (LLVM's AMDGPU memory model).
struct Scope {
    gfx: &'static str,
    mach: u32,
    /// Suffix of a system-scope (relaxed or acquire) load/store/RMW.
    sys: &'static str,
    /// What follows an acquire: the cache invalidations.
    acquire: &'static [&'static str],
    /// What precedes a release: write back L2.
    release: &'static str,
}

const GFX90A: Scope = Scope {
    gfx: "gfx90a",
    mach: 0x3f,
    sys: "glc",
    acquire: &["buffer_invl2", "buffer_wbinvl1_vol"],
    release: "buffer_wbl2",
};
const GFX942: Scope = Scope {
    gfx: "gfx942",
    mach: 0x4c,
    sys: "sc0 sc1",
    acquire: &["buffer_inv sc0 sc1"],
    release: "buffer_wbl2 sc0 sc1",
};

fn check(scope: &Scope) {
    let Some(artifact) = build(scope.gfx) else {
        return;
    };
    let path = artifact.path();
    let elf = std::fs::read(path).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!((elf[4], elf[7]), (2, 64), "ELF64, OS ABI AMDGPU_HSA");
    assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 224, "EM_AMDGPU");
    assert_eq!(u16::from_le_bytes([elf[16], elf[17]]), 3, "ET_DYN");
    assert_eq!(u32::from_le_bytes(elf[48..52].try_into().unwrap()) & 0xff, scope.mach);

    let Some(objdump) = llvm_tool(&artifact, "llvm-objdump") else {
        eprintln!("llvm-objdump not found: not disassembling {}", path.display());
        return;
    };
    let syms = run(&objdump, &["-T"], path);
    for k in KERNELS {
        assert!(
            syms.lines()
                .any(|l| l.ends_with(&format!(" {k}.kd")) && l.contains("O ")),
            "no `{k}.kd` object in\n{syms}"
        );
    }
    let asm = run(&objdump, &["-d"], path);
    for k in KERNELS {
        assert!(asm.contains(&format!("<{k}>:")), "no kernel {k}");
    }

    let f = function(&asm, "<rpc_noop_kernel>");
    assert!(!f.is_empty());
    let find = |pred: &dyn Fn(&str) -> bool, from: usize| f.iter().skip(from).position(|i| pred(i)).map(|p| p + from);
    let dump = f.join("\n");
    let sys_load = |i: &str| i.starts_with("flat_load_dword ") && i.ends_with(scope.sys);

    // Lanes layer.
    for needle in [
        "v_mbcnt_lo_u32_b32",
        "v_mbcnt_hi_u32_b32",
        "v_readlane_b32",
        "s_sleep 1",
    ] {
        assert!(
            f.iter().any(|i| i.starts_with(needle)),
            "no `{needle}` in rpc_noop_kernel:\n{dump}"
        );
    }

    // The lock: a read-modify-write, then the acquire fence before the mailbox loads.
    let rmw = find(&|i| i.starts_with("flat_atomic_") || i.starts_with("global_atomic_"), 0)
        .unwrap_or_else(|| panic!("no lock read-modify-write:\n{dump}"));
    let acq = find(&|i| i == scope.acquire[0], rmw).unwrap_or_else(|| panic!("no acquire after the lock:\n{dump}"));
    for (k, inv) in scope.acquire.iter().enumerate() {
        assert_eq!(f[acq + k], *inv, "acquire sequence:\n{dump}");
    }
    let mailbox = find(&sys_load, acq).unwrap_or_else(|| panic!("no system-scope mailbox load:\n{dump}"));
    // The inbox is read after the lock (unless the port is known idle, a
    // branch on the state bits the lock's atomic returned).
    assert!(
        mailbox - acq <= 40,
        "mailbox loads not shortly after the lock's acquire:\n{dump}"
    );
    assert!(
        f[mailbox + 1..].iter().take(8).any(|i| i.starts_with("v_readlane_b32")),
        "mailbox value not broadcast with v_readlane:\n{dump}"
    );

    // Release: write back L2, wait, then the outbox flip: a plain dword store,
    // the first memory access after the wait. One lane stores it, so the exec
    // mask is narrowed (`s_and_saveexec`, a branch over the store) in between.
    let memory = |i: &str| {
        ["flat_", "global_", "buffer_", "scratch_", "s_load", "s_store"]
            .iter()
            .any(|p| i.starts_with(p))
    };
    let mut releases = 0;
    for (at, _) in f.iter().enumerate().filter(|(_, i)| *i == scope.release) {
        let next = &f[at + 1..(at + 24).min(f.len())];
        if next.first().is_some_and(|i| i.starts_with("s_waitcnt vmcnt(0)"))
            && next
                .iter()
                .find(|i| memory(i))
                .is_some_and(|i| i.starts_with("flat_store_dword ") || i.starts_with("global_store_dword "))
        {
            releases += 1;
        }
    }
    assert!(
        releases >= 1,
        "no `{}; s_waitcnt vmcnt(0); store` (release + outbox flip):\n{dump}",
        scope.release
    );

    // Acquire after the inbox wait: the invalidation, then the system-scope
    // packet reads (the first global load after it; the packet may be staged
    // in scratch, whose stores can come between, and a reply's branch on the
    // inline bit of the word the wait loaded).
    let packet_read = f.iter().enumerate().any(|(at, i)| {
        i == scope.acquire[scope.acquire.len() - 1]
            && f[at + 1..]
                .iter()
                .take(48)
                .find(|j| j.starts_with("flat_load") || j.starts_with("global_load"))
                .is_some_and(|j| j.starts_with("flat_load_dwordx2 ") && j.ends_with(scope.sys))
    });
    assert!(packet_read, "no acquire followed by system-scope packet reads:\n{dump}");

    // halt: a `-> !` call (HostServices::exit, not a kernel) ends the
    // wavefront with s_endpgm after the host answered; its failure path goes
    // to the panic handler, which traps (`s_trap 2`).
    // When the stub is inlined into its caller (hello_kernel), the halt is a
    // second `s_endpgm` there, beside the kernel's own.
    let exit = function(&asm, "HostServicesClient4exit>");
    let (body, want) = if exit.is_empty() {
        (function(&asm, "<hello_kernel>"), 2)
    } else {
        (exit, 1)
    };
    assert!(
        body.iter().filter(|i| *i == "s_endpgm").count() >= want,
        "exit does not end the wavefront:\n{}",
        body.join("\n")
    );

    // The kernel ABI the host marshals for.
    if let Some(readelf) = llvm_tool(&artifact, "llvm-readelf") {
        let notes = run(&readelf, &["--notes"], path);
        let norm: String = notes.split_whitespace().collect::<Vec<_>>().join(" ");
        let block = norm
            .split("- .agpr_count:")
            .find(|b| b.contains(".name: rpc_noop_kernel "))
            .unwrap_or_else(|| panic!("no metadata for rpc_noop_kernel:\n{notes}"));
        for needle in [
            ".offset: 0 .size: 8 .value_kind: global_buffer",
            ".offset: 8 .size: 4 .value_kind: by_value",
            ".offset: 16 .size: 8 .value_kind: global_buffer",
            ".wavefront_size: 64",
        ] {
            assert!(
                block.contains(needle),
                "`{needle}` not in rpc_noop_kernel's metadata:\n{block}"
            );
        }
        // The explicit arguments take 24 bytes; hidden arguments (the v5
        // block the HSA backend fills) may follow, e.g. once the panic handler
        // formats messages.
        let size: usize = block
            .split(".kernarg_segment_size: ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no kernarg_segment_size in:\n{block}"));
        assert!(size >= 24, "kernarg segment of {size} bytes");
    }
}

#[test]
fn amdgcn_gfx90a_rpc_kernels() {
    check(&GFX90A);
}

#[test]
fn amdgcn_gfx942_rpc_kernels() {
    check(&GFX942);
}

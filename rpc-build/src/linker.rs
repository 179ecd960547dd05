//! How the device crate is linked: [`Linker`], and compiling the `rpc-device-link`
//! shim (the source in `shim.rs`) on demand with the device toolchain's `rustc`.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::artifact::unique_suffix;
use crate::process::run_captured;
use crate::{BuildError, Toolchain};

/// How the device crate was linked.
///
/// ```no_run
/// # use rpc_build::{DeviceBuild, Linker, Target};
/// let artifact = DeviceBuild::new("kernels").build()?;
/// if artifact.linker() == Linker::PtxShim {
///     println!("linked by rpc-device-link (llvm-link, opt, llc)");
/// }
/// # Ok::<(), rpc_build::BuildError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Linker {
    /// rustup's `llvm-bitcode-linker` component (nvptx64).
    LlvmBitcodeLinker,
    /// `rpc-device-link` running `llvm-link`, `opt`, `llc` (nvptx64).
    PtxShim,
    /// `rpc-device-link` running `ld.lld` (amdgcn).
    LldShim,
}

impl fmt::Display for Linker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Linker::LlvmBitcodeLinker => "llvm-bitcode-linker",
            Linker::PtxShim => "rpc-device-link (llvm-link + opt + llc)",
            Linker::LldShim => "rpc-device-link (ld.lld)",
        })
    }
}

/// The shim's source; compiled on demand (see the crate docs).
const SHIM_SOURCE: &str = include_str!("shim.rs");
const SHIM_MAIN: &str = "#[allow(dead_code)]\nmod shim;\nfn main() -> std::process::ExitCode {\n    shim::main()\n}\n";

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Compiles `rpc-device-link` into `<target_dir>/rpc-build/link-<hash>/` unless it is
/// there. The hash covers the shim's source and the compiler, so a changed shim gets a
/// new path: the path is part of the rustflags, hence of every device unit's
/// fingerprint, and cargo relinks (and rebuilds `core`) with the new one.
pub(crate) fn ensure_shim(tc: &Toolchain, target_dir: &Path) -> Result<PathBuf, BuildError> {
    let key = fnv1a(&[
        SHIM_SOURCE.as_bytes(),
        tc.version.as_bytes(),
        tc.rustc.as_os_str().as_encoded_bytes(),
    ]);
    let dir = target_dir.join("rpc-build").join(format!("link-{key:016x}"));
    let exe = dir.join(format!("rpc-device-link{}", std::env::consts::EXE_SUFFIX));
    if exe.is_file() {
        return Ok(exe);
    }
    let unique = unique_suffix();
    let src = dir.join(format!("src-{unique}"));
    fs::create_dir_all(&src).map_err(|e| BuildError::io(format!("cannot create {}", src.display()), e))?;
    let write = |name: &str, text: &str| {
        fs::write(src.join(name), text).map_err(|e| BuildError::io(format!("cannot write {name}"), e))
    };
    write("main.rs", SHIM_MAIN)?;
    write("shim.rs", SHIM_SOURCE)?;
    // rustc names its intermediate files after the output's stem: keep them apart
    // from a concurrent build's by writing the binary inside the private directory.
    let tmp = src.join("rpc-device-link");
    let mut cmd = Command::new(&tc.rustc);
    cmd.env_remove("RUSTC_BOOTSTRAP")
        .env_remove("RUSTUP_TOOLCHAIN")
        .args(["--edition", "2021", "--crate-name", "rpc_device_link"])
        .args(["--crate-type", "bin", "-Copt-level=1", "-Cstrip=debuginfo"])
        .arg(src.join("main.rs"))
        .arg("-o")
        .arg(&tmp);
    // Atomic: a concurrent build may have put one there already.
    let result = run_captured(&mut cmd)
        .and_then(|_| fs::rename(&tmp, &exe).map_err(|e| BuildError::io(format!("cannot move {}", tmp.display()), e)));
    let _ = fs::remove_dir_all(&src);
    result.map(|()| exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_main_compiles_against_shim_source() {
        // The on-demand build writes these two files; make sure main refers to what exists.
        assert!(SHIM_SOURCE.contains("pub fn main() -> ExitCode"));
        assert!(SHIM_MAIN.contains("shim::main()"));
    }
}

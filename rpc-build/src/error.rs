//! [`BuildError`].

use std::fmt;
use std::path::PathBuf;

/// Why a device build failed.
///
/// `Display` gives the whole story (for a toolchain that was not found: what was
/// tried and what to install), so a build script can `panic!("{e}")`.
///
/// ```no_run
/// use rpc_build::{BuildError, DeviceBuild, Target};
/// match DeviceBuild::new("kernels").target(Target::Nvptx { sm: 90 }).build() {
///     Ok(artifact) => println!("{}", artifact.path().display()),
///     Err(BuildError::ToolchainNotFound { .. }) => println!("no GPU toolchain here"),
///     Err(e) => panic!("{e}"),
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// No toolchain could build for the target. `tried` says why each candidate
    /// was rejected; `Display` adds installation instructions.
    ToolchainNotFound {
        /// The target triple.
        target: String,
        /// One line per candidate toolchain.
        tried: Vec<String>,
    },
    /// The target cannot be used (e.g. `sm_60`: the protocol needs scoped atomics).
    UnsupportedTarget(String),
    /// The device crate is not where it was said to be.
    NoDeviceCrate(PathBuf),
    /// A file operation failed.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A command (cargo, rustc compiling the linker shim) failed.
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status, as text.
        status: String,
        /// Its (possibly shortened) standard error.
        stderr: String,
    },
    /// Cargo succeeded but reported no PTX / code object for the crate.
    NoArtifact {
        /// The device crate.
        crate_dir: PathBuf,
        /// The extension looked for.
        extension: &'static str,
    },
    /// The produced file is not what the target should produce.
    BadArtifact {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// [`DeviceBuild::build_to_out_dir`](crate::DeviceBuild::build_to_out_dir) was called
    /// outside a build script (`OUT_DIR` unset).
    NotInBuildScript,
}

impl BuildError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BuildError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ToolchainNotFound { target, tried } => {
                writeln!(
                    f,
                    "rpc-build: no Rust toolchain that can build {target} was found. Tried:"
                )?;
                for t in tried {
                    writeln!(f, "  - {t}")?;
                }
                f.write_str(crate::toolchain::INSTALL_HELP)
            }
            BuildError::UnsupportedTarget(why) => write!(f, "rpc-build: unsupported target: {why}"),
            BuildError::NoDeviceCrate(dir) => {
                write!(
                    f,
                    "rpc-build: no device crate at {} (Cargo.toml missing)",
                    dir.display()
                )
            }
            BuildError::Io { context, source } => write!(f, "rpc-build: {context}: {source}"),
            BuildError::CommandFailed {
                command,
                status,
                stderr,
            } => write!(f, "rpc-build: `{command}` failed ({status}):\n{stderr}"),
            BuildError::NoArtifact { crate_dir, extension } => write!(
                f,
                "rpc-build: cargo built {} but reported no .{extension} file; is it a \
                 `crate-type = [\"cdylib\"]` library?",
                crate_dir.display()
            ),
            BuildError::BadArtifact { path, reason } => {
                write!(f, "rpc-build: {}: {reason}", path.display())
            }
            BuildError::NotInBuildScript => {
                f.write_str("rpc-build: OUT_DIR is not set; build_to_out_dir must run from build.rs")
            }
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchain_not_found_says_what_to_install() {
        let e = BuildError::ToolchainNotFound {
            target: "nvptx64-nvidia-cuda".into(),
            tried: vec![
                "rustup: toolchain `nightly` has neither rust-src nor the nvptx64-nvidia-cuda target".into(),
                "Debian: /usr/bin/rustc not found".into(),
            ],
        };
        let text = e.to_string();
        for needle in [
            "nvptx64-nvidia-cuda",
            "  - rustup: toolchain `nightly` has neither rust-src",
            "  - Debian: /usr/bin/rustc not found",
            "rustup toolchain install nightly --component rust-src --component llvm-bitcode-linker",
            "apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld-22",
            "GPU_RPC_RUSTC",
            "GPU_RPC_LLVM_BIN",
            "GPU_RPC_SKIP_DEVICE_BUILD=1",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }
}

//! Builds a `#![no_std]` device crate (`crate-type = ["cdylib"]`) to PTX for
//! `nvptx64-nvidia-cuda` or to an AMDGPU code object for `amdgcn-amd-amdhsa`, from a
//! host crate's `build.rs` (in the spirit of Rust-CUDA's `cuda_builder`).
//!
//! # From a build script
//!
//! ```no_run
//! // In the host crate's build.rs, `fn main`:
//! rpc_build::DeviceBuild::new("kernels") // the device crate's directory
//!     .target(rpc_build::Target::Nvptx { sm: 90 })
//!     .optional(true) // no GPU toolchain here: empty kernel.ptx plus a warning
//!     .build_to_out_dir("kernel.ptx")
//!     .unwrap_or_else(|e| panic!("{e}"));
//! ```
//!
//! and in the host crate:
//!
//! ```text
//! static KERNEL_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernel.ptx"));
//! // or: env!("GPU_RPC_KERNEL_PTX"), the absolute path of the same file
//! ```
//!
//! The device crate needs its own `[workspace]` table (so it is not taken for a member
//! of the host's workspace), `#![no_std]`, a `#[panic_handler]`, and kernels declared
//! as `#[no_mangle] pub unsafe extern "ptx-kernel" fn` (with `#![feature(abi_ptx)]`)
//! for NVPTX or `extern "gpu-kernel"` (with `#![feature(abi_gpu_kernel)]`) for AMDGPU.
//! It does not need to set a profile: the build passes `lto = true`,
//! `panic = "abort"` and `codegen-units = 1` for the `release` profile with `--config`.
//!
//! # How it builds
//!
//! [`Toolchain::detect`] finds, in order: (a) a rustup `nightly` with `rust-src`, built
//! with `cargo build -Zbuild-std=core`, linked by rustup's `llvm-bitcode-linker` when
//! that component is installed; (b) Debian's `/usr/bin/rustc` and `/usr/bin/cargo`
//! (packages `rustc-web cargo-web rust-web-src rust-web-llvm`) with
//! `RUSTC_BOOTSTRAP=1 -Zbuild-std=core` and LLVM's tools from `/usr/lib/llvm-22/bin`.
//!
//! The device build runs the toolchain's `cargo` directly (not through rustup's proxy)
//! with `RUSTC` pointing at its `rustc`, in its own target directory (by default
//! `<device crate>/target/device`), so it never waits on the outer cargo's build lock
//! and `core`, compiled from source once, is reused by later builds. Environment from
//! the outer build that would leak into it (`RUSTFLAGS`, `CARGO_TARGET_DIR`,
//! `CARGO_BUILD_*`, `CARGO_PROFILE_*`, `RUSTC_WRAPPER`, jobserver variables, build
//! script variables, ...) is removed; the device flags travel in
//! `CARGO_ENCODED_RUSTFLAGS` (`-C target-cpu=sm_XX -C target-feature=+ptx80` and the
//! linker).
//!
//! ## The linker shim
//!
//! rustc links nvptx64 with `llvm-bitcode-linker`, which only rustup ships. Without it,
//! rustc is given `-C linker=<target dir>/rpc-build/rpc-device-link`: a small Rust
//! program (this crate's `rpc-device-link` binary, from `src/shim.rs`) that takes the
//! same command line and runs `llvm-link`, `opt` (internalizing all but the exported
//! kernels) and `llc -march=nvptx64`. It is compiled on demand with the toolchain's own
//! `rustc` (about a second, once per target directory; its path never changes, so
//! `core` is not rebuilt) rather than written as a shell script, because the command
//! line handling (repeated and `=`-joined flags, `@response` files, extracting bitcode
//! members from rlib `ar` archives) is easier to get right, and to unit test, in Rust,
//! and it needs nothing beyond the Rust toolchain that is already there. For amdgcn,
//! rustc 1.96 panics when driving `rust-lld` itself for this target, so it is told
//! `-C linker-flavor=gnu-cc` and the same shim rewrites the driver-style arguments
//! for `ld.lld`.
//!
//! # Environment variables
//!
//! | variable | effect |
//! |---|---|
//! | `GPU_RPC_SKIP_DEVICE_BUILD=1` | [`DeviceBuild::build_to_out_dir`] writes an empty file and a warning |
//! | `GPU_RPC_RUSTC`, `GPU_RPC_CARGO` | use this toolchain, skip detection |
//! | `GPU_RPC_RUSTUP_TOOLCHAIN` | the rustup toolchain tried first (default `nightly`) |
//! | `GPU_RPC_LLVM_BIN` | directory with `llvm-link`, `opt`, `llc` |
//! | `GPU_RPC_LLD` | `ld.lld`/`rust-lld` for amdgcn |
//! | `GPU_RPC_DEVICE_TARGET_DIR` | the device build's target directory |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod artifact;
mod error;
pub mod footprint;
mod linker;
mod messages;
mod process;
#[allow(dead_code)] // Also the `rpc-device-link` binary; not every item is used here.
mod shim;
mod target;
mod toolchain;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use artifact::{check_artifact, copy_atomically, parse_dep_info};
pub use artifact::{Artifact, Emitted};
pub use error::BuildError;
pub use footprint::{cap_registers, DEFAULT_MAX_REGISTERS};
use linker::ensure_shim;
pub use linker::Linker;
use process::{clean_env, run_cargo};
pub use target::{Target, MIN_SM};
pub use toolchain::{Toolchain, ToolchainKind, ENV_CARGO, ENV_LLD, ENV_LLVM_BIN, ENV_RUSTC, ENV_RUSTUP_TOOLCHAIN};

/// When set (to anything but `0` or the empty string),
/// [`DeviceBuild::build_to_out_dir`] skips the device build and writes an empty file.
///
/// ```no_run
/// std::env::set_var(rpc_build::ENV_SKIP, "1");
/// ```
pub const ENV_SKIP: &str = "GPU_RPC_SKIP_DEVICE_BUILD";

/// The device build's target directory, when [`DeviceBuild::target_dir`] is not given.
///
/// ```no_run
/// std::env::set_var(rpc_build::ENV_TARGET_DIR, "/tmp/device-target");
/// ```
pub const ENV_TARGET_DIR: &str = "GPU_RPC_DEVICE_TARGET_DIR";

const ALL_ENV: [&str; 7] = [
    ENV_SKIP,
    ENV_TARGET_DIR,
    ENV_RUSTC,
    ENV_CARGO,
    ENV_RUSTUP_TOOLCHAIN,
    ENV_LLVM_BIN,
    ENV_LLD,
];

/// A device build: which crate, for which GPU, how.
///
/// ```no_run
/// use rpc_build::{DeviceBuild, Target};
/// let artifact = DeviceBuild::new("kernels")
///     .target(Target::Amdgcn { gfx: "gfx90a" })
///     .build()?;
/// assert!(artifact.path().extension().unwrap() == "hsaco");
/// # Ok::<(), rpc_build::BuildError>(())
/// ```
#[derive(Debug, Clone)]
pub struct DeviceBuild {
    crate_dir: PathBuf,
    target: Target,
    target_dir: Option<PathBuf>,
    toolchain: Option<Toolchain>,
    optional: bool,
    env_var: Option<String>,
    rustflags: Vec<String>,
    features: Vec<String>,
    no_default_features: bool,
    max_registers: Option<u32>,
    kernel_max_registers: Vec<(String, u32)>,
}

impl DeviceBuild {
    /// A build of the device crate in `crate_dir` (the directory with its
    /// `Cargo.toml`; relative paths are taken from the current directory, which in a
    /// build script is the host crate's directory) for `sm_90`.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels");
    /// ```
    pub fn new(crate_dir: impl Into<PathBuf>) -> Self {
        DeviceBuild {
            crate_dir: crate_dir.into(),
            target: Target::default(),
            target_dir: None,
            toolchain: None,
            optional: false,
            env_var: None,
            rustflags: Vec::new(),
            features: Vec::new(),
            no_default_features: false,
            max_registers: Some(DEFAULT_MAX_REGISTERS),
            kernel_max_registers: Vec::new(),
        }
    }

    /// Limits the registers of every NVPTX kernel (a `.maxnreg` directive on
    /// each entry of the PTX; default [`DEFAULT_MAX_REGISTERS`], `None` for no
    /// limit). Ignored for AMDGCN.
    ///
    /// Why a limit: ptxas gives a kernel the registers of the hungriest
    /// function it can reach, cold ones included (a panic report, a print);
    /// without a limit those can lift a kernel past 64 registers, and then a
    /// block of 1024 threads does not launch. Under the limit, code that needs
    /// more spills to local memory; gpu_rpc's call path fits 64 without
    /// spilling (CI checks the example kernels with ptxas). A kernel whose own
    /// code needs more should get its own limit
    /// ([`kernel_max_registers`](Self::kernel_max_registers)) or none.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").max_registers(None);
    /// ```
    pub fn max_registers(mut self, limit: Option<u32>) -> Self {
        self.max_registers = limit;
        self
    }

    /// Limits the registers of the NVPTX kernel `kernel` to `limit`, over
    /// [`max_registers`](Self::max_registers): for example a memory-bound
    /// kernel with a rare `gpu_println!`, held at the registers its hot loop
    /// needs so the print's cold path cannot lower its occupancy.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").kernel_max_registers("saxpy", 24);
    /// ```
    pub fn kernel_max_registers(mut self, kernel: impl Into<String>, limit: u32) -> Self {
        self.kernel_max_registers.push((kernel.into(), limit));
        self
    }

    /// Sets the GPU (default `Target::Nvptx { sm: 90 }`).
    ///
    /// ```no_run
    /// # use rpc_build::{DeviceBuild, Target};
    /// let build = DeviceBuild::new("kernels").target(Target::Amdgcn { gfx: "gfx942" });
    /// ```
    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    /// Sets the device build's target directory (default `$GPU_RPC_DEVICE_TARGET_DIR`,
    /// else `<crate_dir>/target/device`). Keep it stable: `core` is compiled there, in one
    /// subdirectory per GPU (`sm_90`, `gfx90a`, ...).
    ///
    /// ```no_run
    /// let out = std::env::var("OUT_DIR").unwrap();
    /// let build = rpc_build::DeviceBuild::new("kernels").target_dir(format!("{out}/device"));
    /// ```
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Uses `toolchain` instead of detecting one.
    ///
    /// ```no_run
    /// # use rpc_build::{DeviceBuild, Target, Toolchain};
    /// let target = Target::Nvptx { sm: 90 };
    /// let tc = Toolchain::detect(&target)?;
    /// let build = DeviceBuild::new("kernels").target(target).toolchain(tc);
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn toolchain(mut self, toolchain: Toolchain) -> Self {
        self.toolchain = Some(toolchain);
        self
    }

    /// When true, [`build_to_out_dir`](Self::build_to_out_dir) writes an empty
    /// placeholder and a `cargo:warning` if no toolchain is found, instead of failing.
    /// Compile errors in the device crate still fail.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").optional(true);
    /// ```
    pub fn optional(mut self, optional: bool) -> Self {
        self.optional = optional;
        self
    }

    /// Names the `cargo:rustc-env` variable that
    /// [`build_to_out_dir`](Self::build_to_out_dir) sets to the output's absolute path
    /// (default `GPU_RPC_` + the file name in upper case, `.` and `-` as `_`:
    /// `kernel.ptx` gives `GPU_RPC_KERNEL_PTX`).
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").env_var("MY_KERNEL_PATH");
    /// ```
    pub fn env_var(mut self, name: impl Into<String>) -> Self {
        self.env_var = Some(name.into());
        self
    }

    /// Adds a rustc flag for the device crate (and `core`), e.g. `-Cdebuginfo=0`.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").rustflag("-Zfmt-debug=none");
    /// ```
    pub fn rustflag(mut self, flag: impl Into<String>) -> Self {
        self.rustflags.push(flag.into());
        self
    }

    /// Enables a cargo feature of the device crate.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").feature("trace");
    /// ```
    pub fn feature(mut self, feature: impl Into<String>) -> Self {
        self.features.push(feature.into());
        self
    }

    /// Disables the device crate's default features.
    ///
    /// ```no_run
    /// let build = rpc_build::DeviceBuild::new("kernels").no_default_features();
    /// ```
    pub fn no_default_features(mut self) -> Self {
        self.no_default_features = true;
        self
    }

    fn resolved_target_dir(&self, crate_dir: &Path) -> PathBuf {
        self.target_dir
            .clone()
            .or_else(|| {
                std::env::var_os(ENV_TARGET_DIR)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| crate_dir.join("target").join("device"))
    }

    /// Builds the device crate; returns where the PTX / code object is.
    ///
    /// The first build compiles `core` from source (about 25 s on two cores); later
    /// builds reuse it.
    ///
    /// ```no_run
    /// use rpc_build::{DeviceBuild, Target};
    /// let artifact = DeviceBuild::new("kernels").target(Target::Nvptx { sm: 90 }).build()?;
    /// let ptx = std::fs::read_to_string(artifact.path()).unwrap();
    /// assert!(ptx.contains(".target sm_90"));
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn build(&self) -> Result<Artifact, BuildError> {
        self.target.validate()?;
        if !self.crate_dir.join("Cargo.toml").is_file() {
            return Err(BuildError::NoDeviceCrate(self.crate_dir.clone()));
        }
        let crate_dir = fs::canonicalize(&self.crate_dir)
            .map_err(|e| BuildError::io(format!("cannot resolve {}", self.crate_dir.display()), e))?;
        let toolchain = match &self.toolchain {
            Some(tc) => tc.clone(),
            None => Toolchain::detect(&self.target)?,
        };
        let target_dir = self.resolved_target_dir(&crate_dir);
        fs::create_dir_all(&target_dir)
            .map_err(|e| BuildError::io(format!("cannot create {}", target_dir.display()), e))?;
        let target_dir = fs::canonicalize(&target_dir)
            .map_err(|e| BuildError::io(format!("cannot resolve {}", target_dir.display()), e))?;

        // One cargo target directory per GPU: `core` is built per `-C target-cpu`
        // anyway, and the uplifted `<crate>.ptx`/`.elf` has the same name for every
        // GPU, so concurrent builds for two GPUs must not share it.
        let cargo_target_dir = target_dir.join(self.target.cpu());

        let linker = match self.target {
            Target::Nvptx { .. } if toolchain.bitcode_linker => Linker::LlvmBitcodeLinker,
            Target::Nvptx { .. } => Linker::PtxShim,
            Target::Amdgcn { .. } => Linker::LldShim,
        };
        let mut flags = vec![format!("-Ctarget-cpu={}", self.target.cpu())];
        if let Target::Nvptx { .. } = self.target {
            flags.push("-Ctarget-feature=+ptx80".to_owned());
        }
        let mut cmd = Command::new(&toolchain.cargo);
        if linker != Linker::LlvmBitcodeLinker {
            let shim = ensure_shim(&toolchain, &target_dir)?;
            flags.push(format!("-Clinker={}", shim.display()));
            if linker == Linker::LldShim {
                // `gnu-cc` is an "unstable" flavor value for this target.
                flags.push("-Zunstable-options".to_owned());
                flags.push("-Clinker-flavor=gnu-cc".to_owned());
                cmd.env(shim::ENV_MODE, "lld");
                if let Some(lld) = &toolchain.lld {
                    cmd.env(shim::ENV_LLD, lld);
                }
            } else {
                cmd.env(shim::ENV_MODE, "ptx");
                if let Some(bin) = &toolchain.llvm_bin {
                    cmd.env(shim::ENV_LLVM_BIN, bin);
                }
            }
        }
        flags.extend(self.rustflags.iter().cloned());

        clean_env(&mut cmd);
        cmd.current_dir(&crate_dir)
            .env("RUSTC", &toolchain.rustc)
            .env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"))
            .args(["build", "--release", "--message-format=json"])
            .arg("--manifest-path")
            .arg(crate_dir.join("Cargo.toml"))
            .args(["--target", self.target.triple()])
            .arg("--target-dir")
            .arg(&cargo_target_dir)
            .args([
                "--config",
                "profile.release.lto=true",
                "--config",
                "profile.release.panic=\"abort\"",
                "--config",
                "profile.release.codegen-units=1",
            ]);
        if toolchain.bootstrap {
            cmd.env("RUSTC_BOOTSTRAP", "1");
        }
        if toolchain.build_std {
            cmd.arg("-Zbuild-std=core");
        }
        if self.no_default_features {
            cmd.arg("--no-default-features");
        }
        if !self.features.is_empty() {
            cmd.arg("--features").arg(self.features.join(","));
        }
        let messages = run_cargo(&mut cmd, &crate_dir)?;

        let rustc_ext = self.target.rustc_extension();
        let built = messages
            .artifacts
            .iter()
            .cloned()
            .rfind(|f| f.extension().is_some_and(|e| e == rustc_ext))
            .ok_or_else(|| BuildError::NoArtifact {
                crate_dir: crate_dir.clone(),
                extension: rustc_ext,
            })?;
        let mut path = built.with_extension(self.target.extension());
        if path != built {
            copy_atomically(&built, &path)?;
        }
        if matches!(self.target, Target::Nvptx { .. })
            && (self.max_registers.is_some() || !self.kernel_max_registers.is_empty())
        {
            // A new file, so that the limits always apply to rustc's own output.
            let text =
                fs::read_to_string(&path).map_err(|e| BuildError::io(format!("reading {}", path.display()), e))?;
            let capped = path.with_extension("limited.ptx");
            fs::write(
                &capped,
                cap_registers(&text, self.max_registers, &self.kernel_max_registers),
            )
            .map_err(|e| BuildError::io(format!("writing {}", capped.display()), e))?;
            path = capped;
        }
        check_artifact(&path, &self.target)?;

        let mut sources = fs::read_to_string(built.with_extension("d"))
            .map(|text| parse_dep_info(&text))
            .unwrap_or_default();
        let std_src = toolchain.sysroot.join("lib/rustlib");
        sources.retain(|p| !p.starts_with(&std_src));
        for file in ["Cargo.toml", "Cargo.lock"] {
            let p = crate_dir.join(file);
            if p.is_file() && !sources.contains(&p) {
                sources.push(p);
            }
        }
        Ok(Artifact {
            path,
            target: self.target,
            toolchain,
            linker,
            sources,
            warnings: messages.warnings,
        })
    }

    /// For `build.rs`: builds, copies the result to `$OUT_DIR/<file_name>`, and prints
    /// `cargo:rerun-if-changed` for the device crate's sources,
    /// `cargo:rerun-if-env-changed` for the `GPU_RPC_*` variables, and
    /// `cargo:rustc-env=<var>=<absolute path>` (see [`env_var`](Self::env_var)).
    ///
    /// With `GPU_RPC_SKIP_DEVICE_BUILD=1`, or when no toolchain is found and the build
    /// is [`optional`](Self::optional), it writes an empty file there instead and prints
    /// a `cargo:warning`, so the host crate still builds on machines without a GPU
    /// toolchain (`include_str!` then gives `""`).
    ///
    /// ```no_run
    /// // build.rs
    /// rpc_build::DeviceBuild::new("kernels")
    ///     .optional(true)
    ///     .build_to_out_dir("kernel.ptx")
    ///     .unwrap_or_else(|e| panic!("{e}"));
    /// ```
    pub fn build_to_out_dir(&self, file_name: &str) -> Result<Emitted, BuildError> {
        let out_dir = std::env::var_os("OUT_DIR")
            .map(PathBuf::from)
            .ok_or(BuildError::NotInBuildScript)?;
        let dest = out_dir.join(file_name);
        let var = self.env_var.clone().unwrap_or_else(|| default_env_var(file_name));
        for name in ALL_ENV {
            println!("cargo:rerun-if-env-changed={name}");
        }
        println!("cargo:rustc-env={var}={}", dest.display());

        let skip = std::env::var(ENV_SKIP).is_ok_and(|v| !v.is_empty() && v != "0");
        let result = if skip {
            Err(format!("{ENV_SKIP} is set"))
        } else {
            match self.build() {
                Ok(artifact) => Ok(artifact),
                Err(e @ BuildError::ToolchainNotFound { .. }) if self.optional => Err(e.to_string()),
                Err(e) => return Err(e),
            }
        };
        match result {
            Ok(artifact) => {
                copy_atomically(artifact.path(), &dest)?;
                for line in artifact.warnings().iter().flat_map(|w| w.lines()) {
                    println!("cargo:warning={line}");
                }
                for source in artifact.sources() {
                    println!("cargo:rerun-if-changed={}", source.display());
                }
                Ok(Emitted::Built {
                    path: dest,
                    artifact: Box::new(artifact),
                })
            }
            Err(reason) => {
                fs::write(&dest, b"").map_err(|e| BuildError::io(format!("cannot write {}", dest.display()), e))?;
                println!(
                    "cargo:warning=rpc-build: skipped the device build of {} for {}; {} is an empty placeholder",
                    self.crate_dir.display(),
                    self.target,
                    dest.display()
                );
                for line in reason.lines().filter(|l| !l.trim().is_empty()) {
                    println!("cargo:warning={line}");
                }
                for file in ["Cargo.toml", "src"] {
                    println!("cargo:rerun-if-changed={}", self.crate_dir.join(file).display());
                }
                Ok(Emitted::Skipped { path: dest, reason })
            }
        }
    }
}

fn default_env_var(file_name: &str) -> String {
    let mut var = String::from("GPU_RPC_");
    var.extend(file_name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    var
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_env_var_names() {
        assert_eq!(default_env_var("kernel.ptx"), "GPU_RPC_KERNEL_PTX");
        assert_eq!(default_env_var("my-k.hsaco"), "GPU_RPC_MY_K_HSACO");
    }
}

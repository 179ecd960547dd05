//! Finding a Rust toolchain (and the LLVM tools) that can build device code.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{BuildError, Target};

/// Overrides the `rustc` used for device builds (skips detection).
pub const ENV_RUSTC: &str = "GPU_RPC_RUSTC";
/// Overrides the `cargo` used with [`ENV_RUSTC`].
pub const ENV_CARGO: &str = "GPU_RPC_CARGO";
/// Directory holding `llvm-link`, `opt`, `llc` (and `ld.lld`, `llvm-objdump`).
pub const ENV_LLVM_BIN: &str = "GPU_RPC_LLVM_BIN";
/// The linker for `amdgcn-amd-amdhsa` (`ld.lld` or `rust-lld`).
pub const ENV_LLD: &str = "GPU_RPC_LLD";
/// The rustup toolchain tried first (default `nightly`).
pub const ENV_RUSTUP_TOOLCHAIN: &str = "GPU_RPC_RUSTUP_TOOLCHAIN";

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";

/// Where a [`Toolchain`] came from.
///
/// ```no_run
/// use rpc_build::{Target, Toolchain, ToolchainKind};
/// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
/// if tc.kind() == ToolchainKind::Debian {
///     println!("using Debian's rustc with RUSTC_BOOTSTRAP=1");
/// }
/// # Ok::<(), rpc_build::BuildError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolchainKind {
    /// A rustup toolchain (`nightly` unless `GPU_RPC_RUSTUP_TOOLCHAIN` says otherwise)
    /// with the `rust-src` component (or the target's prebuilt `core`).
    RustupNightly,
    /// Debian's `rustc-web`/`cargo-web` (`/usr/bin/rustc`) with `rust-web-src` and
    /// LLVM's tools from `/usr/lib/llvm-<N>/bin`; unstable flags through
    /// `RUSTC_BOOTSTRAP=1`.
    Debian,
    /// Named by `GPU_RPC_RUSTC` (and `GPU_RPC_CARGO`).
    Custom,
}

impl fmt::Display for ToolchainKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ToolchainKind::RustupNightly => "rustup nightly",
            ToolchainKind::Debian => "Debian rustc-web",
            ToolchainKind::Custom => "GPU_RPC_RUSTC",
        })
    }
}

/// A Rust toolchain able to build a device crate for one [`Target`], with the tools
/// that target's link step needs.
///
/// ```no_run
/// use rpc_build::{Target, Toolchain};
/// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
/// println!("{tc}"); // e.g. "Debian rustc-web: /usr/bin/rustc (rustc 1.96.0 ..., LLVM 22) ..."
/// # Ok::<(), rpc_build::BuildError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    pub(crate) kind: ToolchainKind,
    pub(crate) rustc: PathBuf,
    pub(crate) cargo: PathBuf,
    pub(crate) sysroot: PathBuf,
    pub(crate) version: String,
    pub(crate) host: String,
    pub(crate) llvm_major: Option<u32>,
    /// `-Zbuild-std=core` (rust-src present) rather than a prebuilt target.
    pub(crate) build_std: bool,
    /// Needs `RUSTC_BOOTSTRAP=1` for `-Z` flags and kernel ABIs.
    pub(crate) bootstrap: bool,
    /// rustup's `llvm-bitcode-linker` component is installed (nvptx only).
    pub(crate) bitcode_linker: bool,
    pub(crate) llvm_bin: Option<PathBuf>,
    pub(crate) lld: Option<PathBuf>,
}

impl fmt::Display for Toolchain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({}", self.kind, self.rustc.display(), self.version)?;
        if let Some(major) = self.llvm_major {
            write!(f, ", LLVM {major}")?;
        }
        write!(f, "), cargo {}", self.cargo.display())?;
        if self.build_std {
            f.write_str(", -Zbuild-std=core")?;
        }
        if self.bitcode_linker {
            f.write_str(", llvm-bitcode-linker")?;
        }
        if let Some(bin) = &self.llvm_bin {
            write!(f, ", LLVM tools {}", bin.display())?;
        }
        if let Some(lld) = &self.lld {
            write!(f, ", lld {}", lld.display())?;
        }
        Ok(())
    }
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn is_file(path: &Path) -> bool {
    path.is_file()
}

/// Finds `name` on `PATH`.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_file(p))
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let shown = crate::process::show(cmd);
    let out = cmd.output().map_err(|e| format!("`{shown}` could not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `rustc -vV`: (first line, host triple, LLVM major).
fn rustc_info(rustc: &Path) -> Result<(String, String, Option<u32>), String> {
    let text = output(Command::new(rustc).arg("-vV").env_remove("RUSTUP_TOOLCHAIN"))?;
    let version = text.lines().next().unwrap_or_default().to_owned();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_owned())
    };
    let host = field("host:").ok_or_else(|| format!("{} -vV printed no host", rustc.display()))?;
    let llvm = field("LLVM version:").and_then(|v| v.split('.').next()?.parse().ok());
    Ok((version, host, llvm))
}

fn llvm_tools_major(bin: &Path) -> Option<u32> {
    let text = output(Command::new(bin.join("llc")).arg("--version")).ok()?;
    // "  LLVM version 22.1.8" (Debian: "Debian LLVM version 22.1.8")
    let rest = &text[text.find("LLVM version ")? + "LLVM version ".len()..];
    rest.split('.').next()?.trim().parse().ok()
}

fn has_llvm_tools(bin: &Path) -> bool {
    ["llvm-link", "opt", "llc"].iter().all(|t| is_file(&bin.join(t)))
}

impl Toolchain {
    /// Finds a toolchain for `target`, trying in order: the rustup toolchain named by
    /// `GPU_RPC_RUSTUP_TOOLCHAIN` (default `nightly`) when it has `rust-src`,
    /// then Debian's `/usr/bin/rustc` with `/usr/lib/rustlib/src/rust/library` and
    /// `/usr/lib/llvm-<N>/bin`. `GPU_RPC_RUSTC` (with `GPU_RPC_CARGO`) skips the search.
    /// `GPU_RPC_LLVM_BIN` and `GPU_RPC_LLD` name the LLVM tools and linker.
    ///
    /// The error, [`BuildError::ToolchainNotFound`], lists what was tried and what to
    /// install.
    ///
    /// ```no_run
    /// use rpc_build::{Target, Toolchain};
    /// match Toolchain::detect(&Target::Amdgcn { gfx: "gfx90a" }) {
    ///     Ok(tc) => println!("found {tc}"),
    ///     Err(e) => eprintln!("{e}"),
    /// }
    /// ```
    pub fn detect(target: &Target) -> Result<Toolchain, BuildError> {
        let mut tried = Vec::new();
        if let Some(rustc) = env_path(ENV_RUSTC) {
            return Self::custom(rustc, target).map_err(|why| BuildError::ToolchainNotFound {
                target: target.triple().to_owned(),
                tried: vec![format!(
                    "{ENV_RUSTC}={}: {why}",
                    std::env::var(ENV_RUSTC).unwrap_or_default()
                )],
            });
        }
        match Self::rustup(target) {
            Ok(tc) => return Ok(tc),
            Err(why) => tried.push(format!("rustup: {why}")),
        }
        match Self::debian(target) {
            Ok(tc) => return Ok(tc),
            Err(why) => tried.push(format!("Debian: {why}")),
        }
        Err(BuildError::ToolchainNotFound {
            target: target.triple().to_owned(),
            tried,
        })
    }

    fn rustup(target: &Target) -> Result<Toolchain, String> {
        let name = std::env::var(ENV_RUSTUP_TOOLCHAIN)
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "nightly".to_owned());
        let rustup = which("rustup")
            .or_else(|| env_path("CARGO_HOME").map(|h| h.join("bin/rustup")))
            .or_else(|| env_path("HOME").map(|h| h.join(".cargo/bin/rustup")))
            .filter(|p| is_file(p))
            .ok_or("`rustup` not found on PATH, in $CARGO_HOME/bin or ~/.cargo/bin")?;
        let sysroot = PathBuf::from(output(
            Command::new(&rustup)
                .args(["run", &name, "rustc", "--print", "sysroot"])
                // Detection must never download a toolchain.
                .env("RUSTUP_AUTO_INSTALL", "0")
                .env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("RUSTC"),
        )?);
        let rustc = sysroot.join("bin/rustc");
        let cargo = sysroot.join("bin/cargo");
        if !is_file(&cargo) {
            return Err(format!("toolchain `{name}` at {} has no cargo", sysroot.display()));
        }
        let (version, host, llvm_major) = rustc_info(&rustc)?;
        let src = sysroot.join("lib/rustlib/src/rust/library/core");
        let prebuilt = sysroot.join("lib/rustlib").join(target.triple()).join("lib");
        let build_std = src.is_dir();
        if !build_std && !prebuilt.is_dir() {
            return Err(format!(
                "toolchain `{name}` ({version}, {}) has neither rust-src \
                 (lib/rustlib/src/rust/library missing) nor the {} target",
                sysroot.display(),
                target.triple()
            ));
        }
        let bitcode_linker = matches!(target, Target::Nvptx { .. })
            && is_file(&sysroot.join("lib/rustlib").join(&host).join("bin/llvm-bitcode-linker"));
        let mut tc = Toolchain {
            kind: ToolchainKind::RustupNightly,
            bootstrap: !version.contains("nightly") && !version.contains("-dev"),
            rustc,
            cargo,
            sysroot,
            version,
            host,
            llvm_major,
            build_std,
            bitcode_linker,
            llvm_bin: None,
            lld: None,
        };
        tc.find_tools(target)?;
        Ok(tc)
    }

    fn debian(target: &Target) -> Result<Toolchain, String> {
        let rustc = PathBuf::from(DEBIAN_RUSTC);
        let cargo = PathBuf::from(DEBIAN_CARGO);
        for p in [&rustc, &cargo] {
            if !is_file(p) {
                return Err(format!("{} not found", p.display()));
            }
        }
        let sysroot = PathBuf::from(output(Command::new(&rustc).args(["--print", "sysroot"]))?);
        if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
            return Err(format!(
                "{}/lib/rustlib/src/rust/library missing (package rust-web-src)",
                sysroot.display()
            ));
        }
        let (version, host, llvm_major) = rustc_info(&rustc)?;
        let mut tc = Toolchain {
            kind: ToolchainKind::Debian,
            bootstrap: !version.contains("nightly"),
            rustc,
            cargo,
            sysroot,
            version,
            host,
            llvm_major,
            build_std: true,
            bitcode_linker: false,
            llvm_bin: None,
            lld: None,
        };
        tc.find_tools(target)?;
        Ok(tc)
    }

    #[cfg(test)]
    pub(crate) fn custom_for_test(rustc: &str, target: &Target) -> Result<Toolchain, String> {
        Self::custom(PathBuf::from(rustc), target)
    }

    fn custom(rustc: PathBuf, target: &Target) -> Result<Toolchain, String> {
        let cargo = env_path(ENV_CARGO)
            .or_else(|| rustc.parent().map(|d| d.join("cargo")).filter(|p| is_file(p)))
            .or_else(|| which("cargo"))
            .ok_or("no cargo: set GPU_RPC_CARGO")?;
        let sysroot = PathBuf::from(output(
            Command::new(&rustc)
                .args(["--print", "sysroot"])
                .env_remove("RUSTUP_TOOLCHAIN"),
        )?);
        let (version, host, llvm_major) = rustc_info(&rustc)?;
        let build_std = sysroot.join("lib/rustlib/src/rust/library/core").is_dir();
        if !build_std && !sysroot.join("lib/rustlib").join(target.triple()).is_dir() {
            return Err(format!(
                "{} has neither rust-src nor the {} target",
                sysroot.display(),
                target.triple()
            ));
        }
        let bitcode_linker = matches!(target, Target::Nvptx { .. })
            && is_file(&sysroot.join("lib/rustlib").join(&host).join("bin/llvm-bitcode-linker"));
        let mut tc = Toolchain {
            kind: ToolchainKind::Custom,
            bootstrap: !version.contains("nightly") && !version.contains("-dev"),
            rustc,
            cargo,
            sysroot,
            version,
            host,
            llvm_major,
            build_std,
            bitcode_linker,
            llvm_bin: None,
            lld: None,
        };
        tc.find_tools(target)?;
        Ok(tc)
    }

    /// Candidate LLVM tool directories, best first.
    fn llvm_bin_candidates(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(dir) = env_path(ENV_LLVM_BIN) {
            dirs.push(dir);
        }
        // rustup's llvm-tools component.
        dirs.push(self.sysroot.join("lib/rustlib").join(&self.host).join("bin"));
        if let Some(major) = self.llvm_major {
            // Bitcode written by LLVM N is read by LLVM >= N: try N first, then newer.
            for m in major..major + 4 {
                dirs.push(PathBuf::from(format!("/usr/lib/llvm-{m}/bin")));
            }
        }
        if let Ok(bindir) = output(Command::new("llvm-config").arg("--bindir")) {
            dirs.push(PathBuf::from(bindir));
        }
        if let Some(llc) = which("llc") {
            if let Some(dir) = llc.parent() {
                dirs.push(dir.to_path_buf());
            }
        }
        dirs
    }

    fn find_tools(&mut self, target: &Target) -> Result<(), String> {
        let candidates = self.llvm_bin_candidates();
        let need_llvm = matches!(target, Target::Nvptx { .. }) && !self.bitcode_linker;
        let mut rejected = Vec::new();
        for dir in candidates.iter().filter(|d| has_llvm_tools(d)) {
            match (self.llvm_major, llvm_tools_major(dir)) {
                (Some(want), Some(have)) if have < want => {
                    rejected.push(format!(
                        "{} is LLVM {have}, older than rustc's LLVM {want}",
                        dir.display()
                    ));
                }
                _ => {
                    self.llvm_bin = Some(dir.clone());
                    break;
                }
            }
        }
        if need_llvm && self.llvm_bin.is_none() {
            let want = self.llvm_major.map_or_else(|| "rustc's".to_owned(), |m| m.to_string());
            let mut msg = format!(
                "{} ({}) found, but no llvm-link/opt/llc of LLVM >= {want} for rpc-build's \
                 linker shim (looked in $GPU_RPC_LLVM_BIN, rustup's llvm-tools, /usr/lib/llvm-N/bin, \
                 llvm-config --bindir, PATH)",
                self.rustc.display(),
                self.version
            );
            for r in rejected {
                msg.push_str("; ");
                msg.push_str(&r);
            }
            return Err(msg);
        }
        if matches!(target, Target::Amdgcn { .. }) {
            let host_bin = self.sysroot.join("lib/rustlib").join(&self.host).join("bin");
            let mut lld_candidates: Vec<PathBuf> = Vec::new();
            lld_candidates.extend(env_path(ENV_LLD));
            lld_candidates.extend(self.llvm_bin.as_ref().map(|b| b.join("ld.lld")));
            if let Some(major) = self.llvm_major {
                lld_candidates.push(PathBuf::from(format!("/usr/lib/llvm-{major}/bin/ld.lld")));
            }
            lld_candidates.push(host_bin.join("rust-lld"));
            lld_candidates.push(PathBuf::from("/usr/bin/rust-lld"));
            lld_candidates.extend(which("ld.lld"));
            // `is_file` follows symlinks: Debian's /usr/bin/rust-lld dangles without lld-N.
            self.lld = lld_candidates.into_iter().find(|p| is_file(p));
            if self.lld.is_none() {
                return Err(format!(
                    "{} ({}) found, but no ld.lld/rust-lld to link amdgcn code objects \
                     (set GPU_RPC_LLD, or install lld-{} on Debian)",
                    self.rustc.display(),
                    self.version,
                    self.llvm_major.map_or_else(|| "N".to_owned(), |m| m.to_string())
                ));
            }
        }
        Ok(())
    }

    /// Where this toolchain came from.
    ///
    /// ```no_run
    /// # use rpc_build::{Target, Toolchain};
    /// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
    /// println!("{}", tc.kind());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn kind(&self) -> ToolchainKind {
        self.kind
    }

    /// The `rustc` used for device code.
    ///
    /// ```no_run
    /// # use rpc_build::{Target, Toolchain};
    /// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
    /// println!("{}", tc.rustc().display());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn rustc(&self) -> &Path {
        &self.rustc
    }

    /// The `cargo` used for device builds.
    ///
    /// ```no_run
    /// # use rpc_build::{Target, Toolchain};
    /// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
    /// println!("{}", tc.cargo().display());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn cargo(&self) -> &Path {
        &self.cargo
    }

    /// The directory with LLVM's tools (`llvm-link`, `opt`, `llc`, often `llvm-objdump`)
    /// matching this rustc, when one was found.
    ///
    /// ```no_run
    /// # use rpc_build::{Target, Toolchain};
    /// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
    /// if let Some(bin) = tc.llvm_bin() {
    ///     println!("{}", bin.join("llvm-objdump").display());
    /// }
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn llvm_bin(&self) -> Option<&Path> {
        self.llvm_bin.as_deref()
    }

    /// The linker for amdgcn code objects (found only when detecting for
    /// [`Target::Amdgcn`]).
    ///
    /// ```no_run
    /// # use rpc_build::{Target, Toolchain};
    /// let tc = Toolchain::detect(&Target::Amdgcn { gfx: "gfx942" })?;
    /// println!("{:?}", tc.lld());
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn lld(&self) -> Option<&Path> {
        self.lld.as_deref()
    }

    /// True when `core` is compiled from the toolchain's `rust-src` (`-Zbuild-std=core`).
    ///
    /// ```no_run
    /// # use rpc_build::{Target, Toolchain};
    /// let tc = Toolchain::detect(&Target::Nvptx { sm: 90 })?;
    /// assert!(tc.builds_std() || tc.kind() != rpc_build::ToolchainKind::Debian);
    /// # Ok::<(), rpc_build::BuildError>(())
    /// ```
    pub fn builds_std(&self) -> bool {
        self.build_std
    }
}

/// The text appended to [`BuildError::ToolchainNotFound`]: both ways to get a toolchain.
pub(crate) const INSTALL_HELP: &str = "\
Install one of:
  (a) rustup (needs network access):
        rustup toolchain install nightly --component rust-src --component llvm-bitcode-linker --component llvm-tools
      rpc-build then runs `cargo +nightly build -Zbuild-std=core` (without llvm-bitcode-linker it links
      with its own shim and needs llvm-link/opt/llc of LLVM >= the nightly's; name them with GPU_RPC_LLVM_BIN).
  (b) Debian 12 packages (Rust 1.96 with its library source, LLVM 22 tools):
        apt-get install rustc-web cargo-web rust-web-src rust-web-llvm lld-22
      rpc-build then runs /usr/bin/cargo with RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 and LLVM's tools from
      /usr/lib/llvm-22/bin (lld-22 is needed for amdgcn: /usr/bin/rust-lld points to it).
Or name a toolchain: GPU_RPC_RUSTC (and GPU_RPC_CARGO, GPU_RPC_LLVM_BIN, GPU_RPC_LLD).
To build the host crate without device code, set GPU_RPC_SKIP_DEVICE_BUILD=1.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_with_bogus_override_reports_it() {
        // GPU_RPC_RUSTC pointing nowhere must fail with a ToolchainNotFound naming it.
        // (Exercised through `custom` to avoid mutating the process environment.)
        let err = Toolchain::custom_for_test("/nonexistent/rustc", &Target::default()).unwrap_err();
        assert!(err.contains("/nonexistent/rustc"), "{err}");
    }
}

//! The GPU a device crate is built for: [`Target`] (triple, `-C target-cpu`, output
//! extension, and whether the protocol can run on it) and [`MIN_SM`].

use std::fmt;

use crate::BuildError;

/// The lowest NVPTX architecture accepted: the protocol needs `.sys`-scoped
/// acquire/release operations, which PTX has from `sm_70`.
///
/// ```
/// assert_eq!(rpc_build::MIN_SM, 70);
/// ```
pub const MIN_SM: u32 = 70;

/// The GPU to build for.
///
/// ```
/// use rpc_build::Target;
/// assert_eq!(Target::Nvptx { sm: 90 }.triple(), "nvptx64-nvidia-cuda");
/// assert_eq!(Target::Amdgcn { gfx: "gfx90a" }.cpu(), "gfx90a");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// `nvptx64-nvidia-cuda` for `sm_<sm>` (70 or newer), PTX ISA 8.0 or newer.
    Nvptx {
        /// The compute capability times ten: 90 for `sm_90` (H100/H200).
        sm: u32,
    },
    /// `amdgcn-amd-amdhsa` for one GPU, e.g. `gfx90a` (MI200) or `gfx942` (MI300).
    Amdgcn {
        /// The `gfx` name LLVM knows the GPU by.
        gfx: &'static str,
    },
}

impl Default for Target {
    fn default() -> Self {
        Target::Nvptx { sm: 90 }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.triple(), self.cpu())
    }
}

impl Target {
    /// The rustc target triple.
    ///
    /// ```
    /// assert_eq!(rpc_build::Target::Amdgcn { gfx: "gfx942" }.triple(), "amdgcn-amd-amdhsa");
    /// ```
    pub fn triple(&self) -> &'static str {
        match self {
            Target::Nvptx { .. } => "nvptx64-nvidia-cuda",
            Target::Amdgcn { .. } => "amdgcn-amd-amdhsa",
        }
    }

    /// The `-C target-cpu` value.
    ///
    /// ```
    /// assert_eq!(rpc_build::Target::Nvptx { sm: 90 }.cpu(), "sm_90");
    /// ```
    pub fn cpu(&self) -> String {
        match self {
            Target::Nvptx { sm } => format!("sm_{sm}"),
            Target::Amdgcn { gfx } => (*gfx).to_owned(),
        }
    }

    /// The extension of the built file: `ptx` or `hsaco`.
    ///
    /// ```
    /// assert_eq!(rpc_build::Target::Amdgcn { gfx: "gfx90a" }.extension(), "hsaco");
    /// ```
    pub fn extension(&self) -> &'static str {
        match self {
            Target::Nvptx { .. } => "ptx",
            Target::Amdgcn { .. } => "hsaco",
        }
    }

    /// Checks that the protocol can run on this target.
    ///
    /// ```
    /// use rpc_build::Target;
    /// assert!(Target::Nvptx { sm: 90 }.validate().is_ok());
    /// assert!(Target::Nvptx { sm: 60 }.validate().is_err()); // no scoped atomics
    /// assert!(Target::Amdgcn { gfx: "sm_90" }.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), BuildError> {
        match self {
            Target::Nvptx { sm } if *sm < MIN_SM => Err(BuildError::UnsupportedTarget(format!(
                "sm_{sm}: gpu_rpc needs sm_{MIN_SM} or newer (ld.acquire/st.release/fence.acq_rel \
                 with .sys scope)"
            ))),
            Target::Amdgcn { gfx }
                if !(gfx.len() > 3
                    && gfx.starts_with("gfx")
                    && gfx
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b':' || b == b'+')) =>
            {
                Err(BuildError::UnsupportedTarget(format!(
                    "{gfx:?} is not an AMDGPU processor name such as \"gfx90a\" or \"gfx942\""
                )))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn rustc_extension(&self) -> &'static str {
        match self {
            Target::Nvptx { .. } => "ptx",
            Target::Amdgcn { .. } => "elf",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_old_nvptx_and_bad_gfx() {
        let e = Target::Nvptx { sm: 61 }.validate().unwrap_err();
        assert!(e.to_string().contains("sm_70"), "{e}");
        assert!(Target::Nvptx { sm: 70 }.validate().is_ok());
        assert!(Target::Amdgcn { gfx: "gfx90a" }.validate().is_ok());
        assert!(Target::Amdgcn { gfx: "gfx90a:xnack+" }.validate().is_ok());
        assert!(Target::Amdgcn { gfx: "" }.validate().is_err());
        assert!(Target::Amdgcn { gfx: "gfx9 0a" }.validate().is_err());
    }
}

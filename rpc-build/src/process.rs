//! Running the device toolchain as child processes: the environment an outer cargo
//! must not pass on, showing a command line, and capturing the output of a tool or
//! of the device build's cargo (`--message-format=json`).

use std::path::Path;
use std::process::Command;

use crate::{messages, BuildError};

/// Removes what an outer cargo (or the user's shell) set that would change or break
/// the device build.
pub(crate) fn clean_env(cmd: &mut Command) {
    const KEEP_CARGO: [&str; 7] = [
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_TERM_",
        "CARGO_BUILD_JOBS",
    ];
    const REMOVE: [&str; 20] = [
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "RUSTC_BOOTSTRAP",
        "RUSTUP_TOOLCHAIN",
        "MAKEFLAGS",
        "MFLAGS",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "PROFILE",
        "OPT_LEVEL",
        "DEBUG",
        "NUM_JOBS",
        "RUSTC_ERROR_METADATA_DST",
        "__CARGO_FIX_PLZ",
    ];
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let cargo_var = key.starts_with("CARGO_") && !KEEP_CARGO.iter().any(|k| key.starts_with(k));
        let internal = key.starts_with("__CARGO");
        if cargo_var || internal || REMOVE.contains(&key) {
            cmd.env_remove(key);
        }
    }
}

pub(crate) fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

pub(crate) fn run_captured(cmd: &mut Command) -> Result<String, BuildError> {
    let out = cmd
        .output()
        .map_err(|e| BuildError::io(format!("cannot run {}", cmd.get_program().to_string_lossy()), e))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = lines[lines.len().saturating_sub(200)..].join("\n");
    Err(BuildError::CommandFailed {
        command: show(cmd),
        status: out.status.to_string(),
        stderr: tail,
    })
}

/// Run the device build's cargo with `--message-format=json`: its messages,
/// or, when it fails, rustc's rendered errors and the end of cargo's stderr.
pub(crate) fn run_cargo(cmd: &mut Command, workspace_dir: &Path) -> Result<messages::CargoMessages, BuildError> {
    let out = cmd
        .output()
        .map_err(|e| BuildError::io(format!("cannot run {}", cmd.get_program().to_string_lossy()), e))?;
    let parsed = messages::parse(&String::from_utf8_lossy(&out.stdout), workspace_dir);
    if out.status.success() {
        return Ok(parsed);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let mut report = parsed.errors.join("\n\n");
    if !report.is_empty() {
        report.push_str("\n\n");
    }
    report.push_str(&lines[lines.len().saturating_sub(50)..].join("\n"));
    Err(BuildError::CommandFailed {
        command: show(cmd),
        status: out.status.to_string(),
        stderr: report,
    })
}

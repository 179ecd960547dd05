//! Builds `tests/fixtures/host-crate`, whose build.rs uses `DeviceBuild::build_to_out_dir`
//! on the atomics kernel, with a hostile outer environment, and runs it.

use std::path::Path;
use std::process::Command;

use rpc_build::{Target, Toolchain};

fn run_host(skip: bool) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/host-crate");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&dir)
        .args(["run", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(dir.join("target/host"))
        // Host-only settings that must not reach the device build.
        .env("RUSTFLAGS", "-Ctarget-cpu=x86-64-v2")
        .env("CARGO_TARGET_DIR", dir.join("target/wrong"))
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_BUILD_TARGET", "x86_64-unknown-linux-gnu");
    if skip {
        cmd.env("GPU_RPC_SKIP_DEVICE_BUILD", "1");
    } else {
        cmd.env_remove("GPU_RPC_SKIP_DEVICE_BUILD");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "host crate failed:\n{stdout}\n{stderr}");
    eprintln!("{stderr}");
    stdout
}

#[test]
fn host_build_rs_embeds_ptx_or_placeholder() {
    let have_toolchain = Toolchain::detect(&Target::Nvptx { sm: 90 }).is_ok();
    let built = run_host(false);
    assert!(built.contains("path=") && built.contains("/kernel.ptx"), "{built}");
    if have_toolchain {
        assert!(built.contains("entry=true"), "{built}");
        assert!(!built.contains("toolchain=none"), "{built}");
    } else {
        eprintln!("SKIPPED (device part): no nvptx toolchain; the host built with a placeholder");
        assert!(built.contains("bytes=0"), "{built}");
    }
    let skipped = run_host(true);
    assert!(
        skipped.contains("bytes=0") && skipped.contains("toolchain=none"),
        "{skipped}"
    );
}

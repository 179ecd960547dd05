//! gpu-run's command line and error paths, on a machine without a GPU (on a
//! GPU machine `scripts/gpu-check.sh` runs real kernels through it).

use std::io::Write;

use std::process::Command;

fn gpu_run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-run"))
        .args(args)
        .output()
        .expect("gpu-run runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_file(name: &str, contents: &[u8]) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("gpu-run-test-{}-{name}", std::process::id()));
    std::fs::write(&p, contents).unwrap();
    p
}

#[test]
fn missing_file_is_named() {
    let (code, err) = gpu_run(&["/nonexistent/kernel.ptx"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read `/nonexistent/kernel.ptx`"), "{err}");
}

#[test]
fn a_file_that_is_not_an_image_is_refused_before_any_driver_is_loaded() {
    let p = temp_file("notptx.txt", b"hello, world\n");
    let (code, err) = gpu_run(&[p.to_str().unwrap()]);
    std::fs::remove_file(&p).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("not PTX"), "{err}");
}

#[test]
fn bad_numbers_are_usage_errors() {
    for args in [
        &["--threads", "0", "x.ptx"][..],
        &["--blocks", "1,x", "x.ptx"],
        &["--ports", "0", "x.ptx"],
    ] {
        let (code, err) = gpu_run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("error: invalid value") || err.contains("cannot be used with"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn no_driver_is_a_clear_error() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        // Straight to stderr: libtest hides `eprintln!` of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no_driver_is_a_clear_error: this machine has an NVIDIA driver (scripts/gpu-check.sh covers it)"
        );
        return;
    }
    let p = temp_file("k.ptx", b"//\n.version 8.0\n.target sm_90\n.address_size 64\n");
    for all in [false, true] {
        let mut args = vec![p.to_str().unwrap()];
        if all {
            args.insert(0, "--all-devices");
        }
        let (code, err) = gpu_run(&args);
        assert_eq!(code, 1);
        assert!(err.contains("libcuda could not be loaded"), "{err}");
    }
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn amd_code_objects_go_to_the_hsa_backend() {
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // ELF64
    elf[5] = 1; // little-endian
    elf[18] = 224; // EM_AMDGPU
    let p = temp_file("k.hsaco", &elf);
    let (code, err) = gpu_run(&[p.to_str().unwrap()]);
    std::fs::remove_file(&p).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("gpu_rpc hsa"), "{err}");
}

#[test]
fn file_access_flags_are_checked_before_anything_loads() {
    let (code, err) = gpu_run(&["--allow-read", "/nonexistent/dir", "/nonexistent/kernel.ptx"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`/nonexistent/dir` (--allow-read/--allow-write) is not a directory"),
        "{err}"
    );
    let (code, err) = gpu_run(&["--files", "everything", "k.ptx"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--files"), "{err}");
    // Good flags get as far as reading the image.
    let (code, err) = gpu_run(&[
        "--files",
        "rw",
        "--allow-write",
        "/tmp",
        "--allow-env",
        "HOME",
        "/nonexistent/kernel.ptx",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot read `/nonexistent/kernel.ptx`"), "{err}");
}

#[test]
fn help_states_the_trust_model() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-run"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--files", "--allow-read", "--allow-write", "--allow-env", "--stats"] {
        assert!(help.contains(flag), "{flag} not in --help:\n{help}");
    }
}

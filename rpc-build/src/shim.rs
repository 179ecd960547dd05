//! `rpc-device-link`: the linker that rustc runs for GPU targets when no
//! `llvm-bitcode-linker` is installed.
//!
//! This file is self-contained (std only, no crate dependencies): it is the
//! `rpc-device-link` binary's module, it is compiled into the library for unit tests,
//! and `DeviceBuild` compiles it on demand with the device toolchain's `rustc`
//! (about a second, once per device target directory).
//!
//! Two modes, picked by the `RPC_DEVICE_LINK_MODE` environment variable (`ptx` or
//! `lld`) that `DeviceBuild` sets, or, when it is unset, from the arguments:
//!
//! * **ptx** (`nvptx64-nvidia-cuda`, rustc's linker flavor `llbc`): accepts rustc's
//!   `llvm-bitcode-linker` command line (`--export-symbol S` repeated, `.o` and `.rlib`
//!   inputs, `-L dir`, `--target T`, `--target-cpu sm_XX`, `--target-feature=+f,..`,
//!   `-o out.ptx`, `-O3`, `--debug`; anything else is ignored). Rlibs are `ar` archives:
//!   their LLVM bitcode members are extracted (the `lib.rmeta` member is skipped). Then
//!   `llvm-link` joins every module, `opt -passes=internalize,globaldce,default<O3>`
//!   with `-internalize-public-api-list=<exports>` keeps only the exported kernels,
//!   and `llc -march=nvptx64 -mcpu=sm_XX -mattr=<features>` writes the PTX.
//! * **lld** (`amdgcn-amd-amdhsa`): rustc is told `-C linker-flavor=gnu-cc` (rustc 1.96
//!   panics, `assertion failed: l.is_cc()`, when it drives `rust-lld` itself for this
//!   target), so it passes a C compiler driver's command line; the shim rewrites it for
//!   `ld.lld` (`-Wl,a,b` becomes `a b`, driver-only flags such as `-nodefaultlibs` are
//!   dropped) and runs the linker named by `RPC_DEVICE_LINK_LLD`.
//!
//! Tools: `RPC_DEVICE_LINK_LLVM_BIN` names the directory holding `llvm-link`, `opt` and
//! `llc` (otherwise they are looked up on `PATH`). Set `RPC_DEVICE_LINK_KEEP_TEMPS=1`
//! to keep the intermediate bitcode next to the output.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::{env, fs};

/// Environment variable selecting the mode: `ptx` or `lld`.
pub const ENV_MODE: &str = "RPC_DEVICE_LINK_MODE";
/// Environment variable naming the directory with `llvm-link`, `opt` and `llc`.
pub const ENV_LLVM_BIN: &str = "RPC_DEVICE_LINK_LLVM_BIN";
/// Environment variable naming the `ld.lld` (or `rust-lld`) executable.
pub const ENV_LLD: &str = "RPC_DEVICE_LINK_LLD";
/// Environment variable: when `1`, keep intermediate files.
pub const ENV_KEEP_TEMPS: &str = "RPC_DEVICE_LINK_KEEP_TEMPS";

/// What the shim does with its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// LLVM bitcode to PTX through `llvm-link`, `opt` and `llc`.
    Ptx,
    /// C-driver style command line rewritten for `ld.lld`.
    Lld,
}

/// The parts of rustc's `llvm-bitcode-linker` command line that matter.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PtxLinkArgs {
    /// Symbols to keep visible (the kernels).
    pub exports: Vec<String>,
    /// Object files and rlibs, in command-line order.
    pub inputs: Vec<PathBuf>,
    /// The output file (`-o`).
    pub output: Option<PathBuf>,
    /// `--target`.
    pub target: Option<String>,
    /// `--target-cpu`, e.g. `sm_90`.
    pub target_cpu: Option<String>,
    /// `--target-feature` entries, e.g. `+ptx80`.
    pub target_features: Vec<String>,
    /// Optimization level without the `-O`: `0`..`3`, `s`, `z`.
    pub opt_level: Option<String>,
    /// `--debug` was given.
    pub debug: bool,
    /// Arguments that were recognized as flags but are not used.
    pub ignored: Vec<String>,
}

fn split_flag<'a>(arg: &'a str, long: &str) -> Option<Option<&'a str>> {
    if arg == long {
        Some(None)
    } else {
        arg.strip_prefix(long).and_then(|rest| rest.strip_prefix('=')).map(Some)
    }
}

/// Parses rustc's `llvm-bitcode-linker` command line (without the program name).
pub fn parse_ptx_args(args: &[OsString]) -> Result<PtxLinkArgs, String> {
    let mut out = PtxLinkArgs::default();
    let mut it = args.iter();
    let value = |it: &mut std::slice::Iter<'_, OsString>, flag: &str| -> Result<OsString, String> {
        it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"))
    };
    while let Some(arg) = it.next() {
        let Some(s) = arg.to_str() else {
            out.inputs.push(PathBuf::from(arg));
            continue;
        };
        // Flags with a value, as `--flag value` or `--flag=value`.
        let mut handled = false;
        for flag in [
            "--export-symbol",
            "--target",
            "--target-cpu",
            "--target-feature",
            "--bitcode-linker-flavor",
            "--linker-flavor",
        ] {
            if let Some(inline) = split_flag(s, flag) {
                let v = match inline {
                    Some(v) => v.to_owned(),
                    None => value(&mut it, flag)?.to_string_lossy().into_owned(),
                };
                match flag {
                    "--export-symbol" => out.exports.push(v),
                    "--target" => out.target = Some(v),
                    "--target-cpu" => out.target_cpu = Some(v),
                    "--target-feature" => out
                        .target_features
                        .extend(v.split(',').map(str::trim).filter(|f| !f.is_empty()).map(str::to_owned)),
                    _ => out.ignored.push(format!("{flag}={v}")),
                }
                handled = true;
                break;
            }
        }
        if handled {
            continue;
        }
        match s {
            "-o" => out.output = Some(PathBuf::from(value(&mut it, "-o")?)),
            "-L" => {
                let dir = value(&mut it, "-L")?;
                out.ignored.push(format!("-L {}", dir.to_string_lossy()));
            }
            "--debug" | "-g" => out.debug = true,
            _ if s.starts_with("-o") && s.len() > 2 => out.output = Some(PathBuf::from(&s[2..])),
            _ if s.starts_with("-L") => out.ignored.push(s.to_owned()),
            _ if s.starts_with("-O") && s.len() > 2 => out.opt_level = Some(s[2..].to_owned()),
            _ if s.starts_with('-') && s.len() > 1 => out.ignored.push(s.to_owned()),
            _ => out.inputs.push(PathBuf::from(s)),
        }
    }
    Ok(out)
}

/// Rewrites a C compiler driver's linker command line for `ld.lld`.
pub fn cc_to_lld_args(args: &[OsString]) -> Vec<OsString> {
    const DRIVER_ONLY: [&str; 8] = [
        "-nodefaultlibs",
        "-nostartfiles",
        "-nostdlib",
        "-static-libgcc",
        "-fno-use-linker-plugin",
        "-pthread",
        "-no-pie",
        "-m64",
    ];
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        match arg.to_str() {
            Some(s) if s.starts_with("-Wl,") => {
                out.extend(s[4..].split(',').filter(|p| !p.is_empty()).map(OsString::from));
            }
            Some(s)
                if DRIVER_ONLY.contains(&s)
                    || s.starts_with("-fuse-ld=")
                    || s.starts_with("-B")
                    || s.starts_with("-march=")
                    || s.starts_with("-mcpu=")
                    || s.starts_with("--target=") => {}
            _ => out.push(arg.clone()),
        }
    }
    out
}

/// Expands `@file` arguments (rustc writes one when a command line gets too long:
/// one argument a line, with `\` escaping).
pub fn expand_response_files(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        match arg.to_str().and_then(|s| s.strip_prefix('@')) {
            Some(path) if !path.is_empty() => {
                let text = fs::read_to_string(path).map_err(|e| format!("cannot read response file {path}: {e}"))?;
                for line in text.lines().filter(|l| !l.is_empty()) {
                    let mut arg = String::with_capacity(line.len());
                    let mut chars = line.chars();
                    while let Some(c) = chars.next() {
                        if c == '\\' {
                            if let Some(next) = chars.next() {
                                arg.push(next);
                            }
                        } else {
                            arg.push(c);
                        }
                    }
                    out.push(OsString::from(arg));
                }
            }
            _ => out.push(arg),
        }
    }
    Ok(out)
}

/// One member of an `ar` archive.
#[derive(Debug, PartialEq, Eq)]
pub struct ArMember<'a> {
    /// The member's name (GNU and BSD long names resolved).
    pub name: String,
    /// The member's bytes.
    pub data: &'a [u8],
}

fn ar_field(field: &[u8]) -> Result<usize, String> {
    let text = std::str::from_utf8(field).map_err(|_| "bad ar header".to_owned())?;
    text.trim()
        .parse()
        .map_err(|_| format!("bad ar header number {text:?}"))
}

/// Lists the members of a (GNU or BSD) `ar` archive, skipping symbol tables.
pub fn ar_members(data: &[u8]) -> Result<Vec<ArMember<'_>>, String> {
    if data.starts_with(b"!<thin>\n") {
        return Err("thin archives are not supported".into());
    }
    if !data.starts_with(b"!<arch>\n") {
        return Err("not an ar archive".into());
    }
    let mut pos = 8;
    let mut long_names: &[u8] = &[];
    let mut members = Vec::new();
    while pos + 60 <= data.len() {
        let header = &data[pos..pos + 60];
        if &header[58..60] != b"`\n" {
            return Err(format!("bad ar member header at offset {pos}"));
        }
        let raw_name = std::str::from_utf8(&header[..16])
            .map_err(|_| "bad ar member name".to_owned())?
            .trim_end();
        let size = ar_field(&header[48..58])?;
        let start = pos + 60;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= data.len())
            .ok_or_else(|| "truncated ar archive".to_owned())?;
        let mut body = &data[start..end];
        pos = end + (size & 1);
        let name = if raw_name == "/" || raw_name == "/SYM64/" || raw_name.starts_with("__.SYMDEF") {
            continue;
        } else if raw_name == "//" {
            long_names = body;
            continue;
        } else if let Some(len) = raw_name.strip_prefix("#1/") {
            // BSD: the name is the first `len` bytes of the body.
            let len = len.parse::<usize>().map_err(|_| "bad BSD name".to_owned())?;
            if len > body.len() {
                return Err("bad BSD name length".into());
            }
            let name = String::from_utf8_lossy(&body[..len]).trim_end_matches('\0').to_owned();
            body = &body[len..];
            if name.starts_with("__.SYMDEF") {
                continue;
            }
            name
        } else if let Some(offset) = raw_name.strip_prefix('/') {
            // GNU: an offset into the `//` member; names end with "/\n".
            let offset = offset.parse::<usize>().map_err(|_| "bad GNU name".to_owned())?;
            let rest = long_names
                .get(offset..)
                .ok_or_else(|| "GNU long name out of range".to_owned())?;
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).trim_end_matches('/').to_owned()
        } else {
            raw_name.trim_end_matches('/').to_owned()
        };
        members.push(ArMember { name, data: body });
    }
    Ok(members)
}

/// True when `data` is LLVM bitcode (raw or in the bitcode wrapper).
pub fn is_bitcode(data: &[u8]) -> bool {
    data.starts_with(b"BC\xC0\xDE") || data.starts_with(&[0xDE, 0xC0, 0x17, 0x0B])
}

fn tool(bin: Option<&Path>, name: &str) -> PathBuf {
    match bin {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| format!("cannot run {shown}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let mut msg = format!("{shown} failed ({})", out.status);
    for stream in [&out.stdout, &out.stderr] {
        if !stream.is_empty() {
            let _ = write!(msg, "\n{}", String::from_utf8_lossy(stream).trim_end());
        }
    }
    Err(msg)
}

/// Maps a rustc/`opt` optimization level to one `llc` accepts.
pub fn llc_opt_level(level: &str) -> &'static str {
    match level {
        "0" => "0",
        "1" => "1",
        "2" | "s" | "z" => "2",
        _ => "3",
    }
}

/// Runs the PTX pipeline: inputs to bitcode modules, `llvm-link`, `opt`, `llc`.
pub fn link_ptx(args: &PtxLinkArgs, llvm_bin: Option<&Path>, keep_temps: bool) -> Result<(), String> {
    let output = args.output.as_deref().ok_or("no output file (-o) given")?;
    let cpu = args.target_cpu.as_deref().unwrap_or("sm_90");
    let mut temp = output.as_os_str().to_owned();
    temp.push(format!(".rpc-link-{}", std::process::id()));
    let temp = PathBuf::from(temp);
    fs::create_dir_all(&temp).map_err(|e| format!("cannot create {}: {e}", temp.display()))?;
    let result = link_ptx_in(args, output, cpu, llvm_bin, &temp);
    if !keep_temps {
        let _ = fs::remove_dir_all(&temp);
    }
    result
}

fn link_ptx_in(
    args: &PtxLinkArgs,
    output: &Path,
    cpu: &str,
    llvm_bin: Option<&Path>,
    temp: &Path,
) -> Result<(), String> {
    let mut modules = Vec::new();
    for (i, input) in args.inputs.iter().enumerate() {
        let data = fs::read(input).map_err(|e| format!("cannot read {}: {e}", input.display()))?;
        if is_bitcode(&data) {
            modules.push(input.clone());
        } else if data.starts_with(b"!<arch>\n") {
            let members = ar_members(&data).map_err(|e| format!("{}: {e}", input.display()))?;
            for (j, member) in members.iter().enumerate() {
                if member.name == "lib.rmeta" || !is_bitcode(member.data) {
                    continue;
                }
                let file_name: String = member
                    .name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let path = temp.join(format!("{i}-{j}-{file_name}"));
                fs::write(&path, member.data).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                modules.push(path);
            }
        } else {
            return Err(format!(
                "{} is neither LLVM bitcode nor an rlib; build the device crate with \
                 lto = true and panic = \"abort\"",
                input.display()
            ));
        }
    }
    if modules.is_empty() {
        return Err("no LLVM bitcode among the inputs".into());
    }
    let linked = temp.join("linked.bc");
    run(Command::new(tool(llvm_bin, "llvm-link"))
        .args(&modules)
        .arg("-o")
        .arg(&linked))?;

    let level = args.opt_level.as_deref().unwrap_or("3");
    let opt_pipeline = match level {
        "0" => "internalize,globaldce".to_owned(),
        l => format!("internalize,globaldce,default<O{}>", llc_opt_level(l)),
    };
    let optimized = temp.join("optimized.bc");
    run(Command::new(tool(llvm_bin, "opt"))
        .arg(format!("-passes={opt_pipeline}"))
        .arg(format!("-internalize-public-api-list={}", args.exports.join(",")))
        .arg(&linked)
        .arg("-o")
        .arg(&optimized))?;

    let mut llc = Command::new(tool(llvm_bin, "llc"));
    llc.arg("-march=nvptx64")
        .arg(format!("-mcpu={cpu}"))
        .arg(format!("-O{}", llc_opt_level(level)));
    if !args.target_features.is_empty() {
        llc.arg(format!("-mattr={}", args.target_features.join(",")));
    }
    run(llc.arg(&optimized).arg("-o").arg(output))
}

/// Runs `lld` (a `rust-lld`/`lld` multi-call binary gets `-flavor gnu`).
pub fn link_lld(lld: &Path, args: &[OsString]) -> Result<(), String> {
    let mut cmd = Command::new(lld);
    let stem = lld.file_stem().and_then(OsStr::to_str).unwrap_or("");
    if stem == "rust-lld" || stem == "lld" || stem.starts_with("lld-") {
        cmd.args(["-flavor", "gnu"]);
    }
    run(cmd.args(cc_to_lld_args(args)))
}

/// Guesses the mode from the arguments when `RPC_DEVICE_LINK_MODE` is unset.
pub fn detect_mode(args: &[OsString]) -> Mode {
    let ptx = args.iter().any(|a| {
        a.to_str()
            .is_some_and(|s| s.starts_with("--export-symbol") || s.starts_with("--target-cpu") || s.contains("nvptx64"))
    });
    if ptx {
        Mode::Ptx
    } else {
        Mode::Lld
    }
}

/// The shim's `main`: reads the arguments and environment, links, reports errors.
pub fn main() -> ExitCode {
    match run_main(env::args_os().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("rpc-device-link: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run_main(args: Vec<OsString>) -> Result<(), String> {
    let args = expand_response_files(args)?;
    let mode = match env::var(ENV_MODE).as_deref() {
        Ok("ptx") => Mode::Ptx,
        Ok("lld") => Mode::Lld,
        _ => detect_mode(&args),
    };
    match mode {
        Mode::Ptx => {
            let parsed = parse_ptx_args(&args)?;
            let llvm_bin = env::var_os(ENV_LLVM_BIN).map(PathBuf::from);
            let keep = env::var(ENV_KEEP_TEMPS).is_ok_and(|v| v == "1");
            link_ptx(&parsed, llvm_bin.as_deref(), keep)
        }
        Mode::Lld => {
            let lld = env::var_os(ENV_LLD)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("ld.lld"));
            link_lld(&lld, &args)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_rustc_llbc_command_line() {
        // As rustc 1.96 passes it for nvptx64-nvidia-cuda (seen).
        let args = os(&[
            "--export-symbol",
            "kernel_a",
            "--export-symbol=kernel_b",
            "/t/deps/k.k.f764a9-cgu.0.rcgu.o",
            "/t/deps/libcompiler_builtins-4689.rlib",
            "-L",
            "/t/deps/rustcaMwn14/raw-dylibs",
            "--target",
            "nvptx64-nvidia-cuda",
            "--target-cpu",
            "sm_90",
            "--target-feature=+ptx32,+ptx78,+ptx80",
            "-L",
            "/usr/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained",
            "-o",
            "/t/deps/k.ptx",
            "-O3",
            "--debug",
            "--some-future-flag",
        ]);
        let p = parse_ptx_args(&args).unwrap();
        assert_eq!(p.exports, ["kernel_a", "kernel_b"]);
        assert_eq!(
            p.inputs,
            [
                PathBuf::from("/t/deps/k.k.f764a9-cgu.0.rcgu.o"),
                PathBuf::from("/t/deps/libcompiler_builtins-4689.rlib")
            ]
        );
        assert_eq!(p.output.as_deref(), Some(Path::new("/t/deps/k.ptx")));
        assert_eq!(p.target.as_deref(), Some("nvptx64-nvidia-cuda"));
        assert_eq!(p.target_cpu.as_deref(), Some("sm_90"));
        assert_eq!(p.target_features, ["+ptx32", "+ptx78", "+ptx80"]);
        assert_eq!(p.opt_level.as_deref(), Some("3"));
        assert!(p.debug);
        assert!(p.ignored.iter().any(|a| a == "--some-future-flag"));
        assert_eq!(detect_mode(&args), Mode::Ptx);
    }

    #[test]
    fn missing_value_is_an_error() {
        assert!(parse_ptx_args(&os(&["-o"])).unwrap_err().contains("-o"));
        assert!(parse_ptx_args(&os(&["--export-symbol"]))
            .unwrap_err()
            .contains("--export-symbol"));
    }

    #[test]
    fn rewrites_cc_command_line_for_lld() {
        // As rustc 1.96 passes it for amdgcn-amd-amdhsa with -C linker-flavor=gnu-cc.
        let args = os(&[
            "-Wl,--version-script=/tmp/x/list",
            "-Wl,--no-undefined-version",
            "/t/k.rcgu.o",
            "-Wl,--as-needed",
            "-L",
            "/tmp/x/raw-dylibs",
            "-Wl,-Bdynamic",
            "-Wl,--eh-frame-hdr",
            "-Wl,-z,noexecstack",
            "-o",
            "/t/k.elf",
            "-Wl,--gc-sections",
            "-shared",
            "-Wl,-O1",
            "-nodefaultlibs",
            "-Wl,-soname=k.elf",
        ]);
        assert_eq!(detect_mode(&args), Mode::Lld);
        assert_eq!(
            cc_to_lld_args(&args),
            os(&[
                "--version-script=/tmp/x/list",
                "--no-undefined-version",
                "/t/k.rcgu.o",
                "--as-needed",
                "-L",
                "/tmp/x/raw-dylibs",
                "-Bdynamic",
                "--eh-frame-hdr",
                "-z",
                "noexecstack",
                "-o",
                "/t/k.elf",
                "--gc-sections",
                "-shared",
                "-O1",
                "-soname=k.elf",
            ])
        );
    }

    #[test]
    fn reads_gnu_archive_with_long_names() {
        let long = "compiler_builtins-b82144.compiler_builtins.27815-cgu.0.rcgu.o";
        let table = format!("{long}/\n");
        let mut ar = b"!<arch>\n".to_vec();
        let mut member = |name: &str, body: &[u8]| {
            ar.extend_from_slice(
                format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", 0, 0, 0, 644, body.len()).as_bytes(),
            );
            ar.extend_from_slice(body);
            if body.len() % 2 == 1 {
                ar.push(b'\n');
            }
        };
        member("/", b"\0\0\0\0");
        member("//", table.as_bytes());
        member("lib.rmeta/", b"rust metadata");
        member("/0", b"BC\xC0\xDEbitcode!");
        let members = ar_members(&ar).unwrap();
        let names: Vec<_> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["lib.rmeta", long]);
        assert!(!is_bitcode(members[0].data));
        assert!(is_bitcode(members[1].data));
        assert_eq!(members[1].data, b"BC\xC0\xDEbitcode!");
        assert!(ar_members(b"not an archive").is_err());
    }

    #[test]
    fn expands_response_files() {
        let dir = env::temp_dir().join(format!("rpc-shim-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("args");
        fs::write(&file, "--export-symbol\nk\n/a\\ b/c.o\n").unwrap();
        let arg = format!("@{}", file.display());
        let expanded = expand_response_files(os(&["-O3", &arg])).unwrap();
        assert_eq!(expanded, os(&["-O3", "--export-symbol", "k", "/a b/c.o"]));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn llc_levels() {
        assert_eq!(llc_opt_level("s"), "2");
        assert_eq!(llc_opt_level("z"), "2");
        assert_eq!(llc_opt_level("0"), "0");
        assert_eq!(llc_opt_level("3"), "3");
    }
}

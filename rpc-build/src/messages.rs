//! Cargo's `--message-format=json` stream of a device build: the files it
//! produced and rustc's diagnostics, with file names a user can open.
//!
//! The device crate is compiled by a cargo run of its own, so its diagnostics
//! would otherwise be lost when the build succeeds, and rustc names files
//! relative to the device crate's workspace, which is not where the user's
//! `cargo build` runs. [`parse`] keeps every diagnostic and rewrites the
//! `--> file:line:col` lines of a relative file to its absolute path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// What a device build's cargo run reported.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CargoMessages {
    /// The `filenames` of every `compiler-artifact` message, in order.
    pub artifacts: Vec<PathBuf>,
    /// rustc's errors, rendered, in order.
    pub errors: Vec<String>,
    /// rustc's warnings (and notes), rendered, in order, without duplicates
    /// and without [`is_own_flag_warning`]s.
    pub warnings: Vec<String>,
}

/// Parse cargo's JSON lines (non-JSON lines are ignored). `workspace_dir`
/// is the directory rustc's relative file names start from.
pub(crate) fn parse(stdout: &str, workspace_dir: &Path) -> CargoMessages {
    let mut out = CargoMessages::default();
    let mut seen = BTreeSet::new();
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match msg["reason"].as_str() {
            Some("compiler-artifact") => {
                let files = msg["filenames"].as_array().into_iter().flatten();
                out.artifacts.extend(files.filter_map(Value::as_str).map(PathBuf::from));
            }
            Some("compiler-message") => {
                let diag = &msg["message"];
                let (Some(level), Some(text)) = (diag["level"].as_str(), diag["message"].as_str()) else {
                    continue;
                };
                let Some(rendered) = diag["rendered"].as_str() else {
                    continue;
                };
                let rendered = absolute_paths(rendered, diag, workspace_dir);
                let rendered = rendered.trim_end().to_string();
                if level.starts_with("error") {
                    out.errors.push(rendered);
                } else if !is_summary(text) && !is_own_flag_warning(text) && seen.insert(rendered.clone()) {
                    out.warnings.push(rendered);
                }
            }
            _ => {}
        }
    }
    out
}

/// `3 warnings emitted`: rustc's count, which says nothing once the
/// warnings themselves are shown.
fn is_summary(text: &str) -> bool {
    text.ends_with("emitted") && text.split(' ').next().is_some_and(|n| n.parse::<u32>().is_ok())
}

/// rustc's ``unstable feature specified for `-Ctarget-feature`: `ptx80` ``,
/// printed once per compiled crate: the flag is rpc-build's own (the warp
/// instructions' `.sync` forms need PTX ISA 8.0), not the user's to fix.
fn is_own_flag_warning(text: &str) -> bool {
    text.contains("-Ctarget-feature") && text.contains("ptx80")
}

/// `rendered` with `--> <file>` of every relative span file that exists
/// under `workspace_dir` made absolute (children's spans included).
fn absolute_paths(rendered: &str, diag: &Value, workspace_dir: &Path) -> String {
    let mut files = BTreeSet::new();
    collect_files(diag, &mut files);
    let mut text = rendered.to_string();
    for file in files {
        let abs = workspace_dir.join(&file);
        if Path::new(&file).is_relative() && abs.exists() {
            text = text.replace(&format!("--> {file}:"), &format!("--> {}:", abs.display()));
        }
    }
    text
}

fn collect_files(diag: &Value, files: &mut BTreeSet<String>) {
    for span in diag["spans"].as_array().into_iter().flatten() {
        if let Some(f) = span["file_name"].as_str() {
            files.insert(f.to_string());
        }
    }
    for child in diag["children"].as_array().into_iter().flatten() {
        collect_files(child, files);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages;

    /// Messages as cargo 1.9x prints them (shortened).
    fn stream(dir: &Path) -> String {
        let warning = serde_json::json!({
            "reason": "compiler-message",
            "message": {
                "level": "warning",
                "message": "unused variable: `x`",
                "rendered": "warning: unused variable: `x`\n --> src/lib.rs:3:9\n  |\n3 |     let x = 1;\n",
                "spans": [{"file_name": "src/lib.rs"}],
                "children": [],
            }
        });
        let flag = serde_json::json!({
            "reason": "compiler-message",
            "message": {"level": "warning", "message": "unstable feature specified for `-Ctarget-feature`: `ptx80`",
                        "rendered": "warning: unstable feature specified for `-Ctarget-feature`: `ptx80`\n", "spans": []}
        });
        let summary = serde_json::json!({
            "reason": "compiler-message",
            "message": {"level": "warning", "message": "2 warnings emitted", "rendered": "warning: 2 warnings emitted\n", "spans": []}
        });
        let error = serde_json::json!({
            "reason": "compiler-message",
            "message": {"level": "error", "message": "cannot find value `y`",
                        "rendered": "error[E0425]: cannot find value `y`\n --> src/lib.rs:4:5\n", "spans": [{"file_name": "src/lib.rs"}],
                        "children": [{"spans": [{"file_name": "src/other.rs"}]}]}
        });
        let artifact = serde_json::json!({
            "reason": "compiler-artifact", "filenames": ["/t/libcore-1.rlib", format!("{}/k.ptx", dir.display())]
        });
        [
            artifact.to_string(),
            "Compiling k v0.1.0".to_string(),
            warning.to_string(),
            flag.to_string(),
            warning.to_string(),
            flag.to_string(),
            summary.to_string(),
            error.to_string(),
            r#"{"reason":"build-finished","success":false}"#.to_string(),
        ]
        .join("\n")
    }

    #[test]
    fn keeps_diagnostics_with_absolute_paths() {
        let dir = std::env::temp_dir().join(format!("rpc-build-messages-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "").unwrap();
        let m = parse(&stream(&dir), &dir);
        let lib = dir.join("src/lib.rs");
        assert_eq!(m.artifacts, [PathBuf::from("/t/libcore-1.rlib"), dir.join("k.ptx")]);
        // Once, without rpc-build's own flag warning and the count.
        assert_eq!(
            m.warnings,
            [format!(
                "warning: unused variable: `x`\n --> {}:3:9\n  |\n3 |     let x = 1;",
                lib.display()
            )]
        );
        assert_eq!(
            m.errors,
            [format!(
                "error[E0425]: cannot find value `y`\n --> {}:4:5",
                lib.display()
            )]
        );
        // A file that is not under the directory keeps its name.
        let elsewhere = parse(&stream(&dir), Path::new("/nonexistent"));
        assert!(
            elsewhere.errors[0].contains("--> src/lib.rs:4:5"),
            "{:?}",
            elsewhere.errors
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_cargo_json_artifacts() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libcore-1.rlib","/t/libcore-1.rmeta"],"fresh":true}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
            "\n",
            r#"{"reason":"compiler-artifact","filenames":["/t/nvptx64-nvidia-cuda/release/k.ptx", "/a\"b\\c\u0041.ptx"],"executable":null}"#,
        );
        let files = messages::parse(json, Path::new("/nonexistent")).artifacts;
        assert_eq!(
            files,
            [
                PathBuf::from("/t/libcore-1.rlib"),
                PathBuf::from("/t/libcore-1.rmeta"),
                PathBuf::from("/t/nvptx64-nvidia-cuda/release/k.ptx"),
                PathBuf::from("/a\"b\\cA.ptx"),
            ]
        );
    }
}

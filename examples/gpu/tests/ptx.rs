//! The protocol's memory-model operations, as the toolchain emitted them in
//! the example kernels' PTX (sm_90): a toolchain change that weakens them
//! fails here, in CI, without a GPU.

use gpu_examples::kernels_ptx;

fn ptx() -> Option<&'static str> {
    match kernels_ptx() {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

/// The body of one `.entry` function.
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name}"));
    let rest = &ptx[start..];
    let end = rest[1..].find(".entry ").map(|e| e + 1).unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn shared_words_use_system_scope_loads_stores_and_fences() {
    let Some(ptx) = ptx() else { return };
    assert!(ptx.contains(".target sm_90"), "not built for sm_90");
    for name in ["rpc_noop_kernel", "rpc_incr_kernel", "hello_kernel", "gpu_main"] {
        let body = entry(ptx, name);
        // Mailboxes and packets: relaxed system-scope loads and stores...
        assert!(body.contains("ld.relaxed.sys"), "{name}: no ld.relaxed.sys");
        assert!(body.contains("st.relaxed.sys"), "{name}: no st.relaxed.sys");
        // ...ordered by system-scope fences (release before a flip, acquire
        // after seeing one)...
        assert!(
            body.contains("fence.acq_rel.sys") || body.contains("fence.sc.sys"),
            "{name}: no system-scope fence"
        );
        // ...and no plain (weak) or read-modify-write access reaches shared
        // memory: every atomic is the device-local lock, followed (within a
        // few instructions) by a GPU-scope fence when it takes the lock.
        assert!(!body.contains("ld.volatile"), "{name}: volatile loads");
        assert!(
            body.contains("fence.acq_rel.gpu"),
            "{name}: no GPU-scope fence for the port lock"
        );
        let lines: Vec<&str> = body.lines().map(str::trim).collect();
        let lock = lines
            .iter()
            .position(|l| l.starts_with("atom.") && l.contains(".or."))
            .unwrap_or_else(|| panic!("{name}: no lock atomic"));
        assert!(
            lines[lock..]
                .iter()
                .take(40)
                .any(|l| l.starts_with("fence.acq_rel.gpu")),
            "{name}: the lock's atomic is not followed by a fence"
        );
        // Warp-level operations of the lanes layer.
        for op in [
            "activemask.b32",
            "shfl.sync.idx.b32",
            "vote.sync.ballot.b32",
            "bar.warp.sync",
        ] {
            assert!(body.contains(op), "{name}: no {op}");
        }
    }
}

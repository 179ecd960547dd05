//! The example kernels' PTX (sm_90), checked in CI without a GPU: the
//! protocol's memory-model operations as the toolchain emitted them (a
//! toolchain change that weakens them fails here), and the device-footprint
//! budget as ptxas assembles them (registers, stack, spills).

use std::io::Write;

use gpu_examples::kernels_ptx;

fn ptx() -> Option<&'static str> {
    match kernels_ptx() {
        Ok(p) => Some(p),
        Err(e) => {
            // Straight to stderr: libtest hides `eprintln!` of passing tests.
            let _ = writeln!(std::io::stderr(), "skipped: {e}");
            None
        }
    }
}

/// The body of one `.entry` function.
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name}"));
    through_body(&ptx[start..])
}

/// `text` from its start through the end of the first function body in it:
/// the first `}` alone at the start of a line after the body's `{` (what
/// follows, another function or entry, is not this one's).
fn through_body(text: &str) -> &str {
    let Some(b) = text.find('{') else { return text };
    let end = text[b..].find("\n}\n").map_or(text.len(), |e| b + e + 3);
    &text[..end]
}

/// The name a `.func` line defines or declares (`.func (.param ..) name(`).
fn func_name(line: &str) -> Option<&str> {
    let rest = line.split(".func").nth(1)?.trim_start();
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')')?.1.trim_start(),
        None => rest,
    };
    let end = rest.find(|c: char| c == '(' || c.is_whitespace()).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Entry `name`'s body followed by the bodies of every function it calls,
/// directly or not: all the code a launch of it can run (the inliner may
/// leave any part of the protocol in a function of its own).
fn reachable(ptx: &str, name: &str) -> String {
    // Function definitions (a header, then a body in braces), by name.
    let mut defs = std::collections::HashMap::new();
    let mut starts: Vec<usize> = ptx
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .filter(|&i| {
            let l = &ptx[i..];
            l.starts_with(".func") || l.starts_with(".visible .func") || l.starts_with(".weak .func")
        })
        .collect();
    starts.push(ptx.len());
    for w in starts.windows(2) {
        let chunk = &ptx[w[0]..w[1]];
        let header = chunk.lines().next().unwrap_or_default();
        let body_start = chunk.find('{');
        let decl_end = chunk.find(';');
        if let (Some(f), Some(b)) = (func_name(header), body_start) {
            if decl_end.is_none_or(|d| b < d) {
                defs.insert(f.to_string(), through_body(chunk));
            }
        }
    }
    let mut code = entry(ptx, name).to_string();
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![code.clone()];
    while let Some(text) = todo.pop() {
        for l in text.lines().map(str::trim).filter(|l| l.starts_with("call")) {
            let callee = l
                .trim_end_matches(';')
                .split(',')
                .map(str::trim)
                .find_map(|t| t.rsplit(' ').next().filter(|n| defs.contains_key(*n)))
                .or_else(|| l.split_whitespace().nth(1).filter(|n| defs.contains_key(*n)));
            if let Some(c) = callee {
                if seen.insert(c.to_string()) {
                    let body = defs[c];
                    code.push_str(body);
                    todo.push(body.to_string());
                }
            }
        }
    }
    code
}

#[test]
fn shared_words_use_system_scope_loads_stores_and_fences() {
    let Some(ptx) = ptx() else { return };
    assert!(ptx.contains(".target sm_90"), "not built for sm_90");
    for name in ["rpc_noop_kernel", "rpc_incr_kernel", "hello_kernel", "gpu_main"] {
        let body = reachable(ptx, name);
        let body = body.as_str();
        // Mailboxes and packets: relaxed system-scope loads and stores...
        assert!(body.contains("ld.relaxed.sys"), "{name}: no ld.relaxed.sys");
        assert!(body.contains("st.relaxed.sys"), "{name}: no st.relaxed.sys");
        // ...ordered by system-scope fences before a flip (release) and by
        // acquiring polls (`ld.acquire.sys`) that see one...
        assert!(
            body.contains("fence.acq_rel.sys") || body.contains("fence.sc.sys"),
            "{name}: no system-scope fence"
        );
        assert!(
            body.contains("ld.acquire.sys"),
            "{name}: no acquiring poll (ld.acquire.sys)"
        );
        // ...and no plain (weak) or read-modify-write access reaches shared
        // memory: every atomic is the device-local lock, taken by an
        // acquiring RMW and released by a releasing one (GPU scope), never
        // a relaxed RMW, whose missing ordering nothing would supply.
        assert!(!body.contains("ld.volatile"), "{name}: volatile loads");
        let lines: Vec<&str> = body.lines().map(str::trim).collect();
        let rmws: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("atom.") || l.starts_with("red."))
            .collect();
        assert!(
            rmws.iter().any(|l| l.starts_with("atom.acquire.gpu.or.b32")),
            "{name}: the lock is not taken by atom.acquire.gpu.or"
        );
        assert!(
            rmws.iter().any(|l| l.starts_with("red.release.gpu.xor.b32")),
            "{name}: the lock is not released by red.release.gpu.xor"
        );
        // (The kernels' own counters, `atom.global.add`, are not the lock's:
        // its bits move by OR, XOR or AND.)
        for l in rmws
            .iter()
            .filter(|l| [".or.", ".xor.", ".and."].iter().any(|op| l.contains(op)))
        {
            assert!(
                l.starts_with("atom.acquire.gpu.") || l.starts_with("red.release.gpu."),
                "{name}: a lock-bit RMW without the lock's ordering: {l}"
            );
        }
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

/// Registers every example kernel may use: 64 lets a block of 1024 threads
/// fit an SM (65 536 registers), as CUDA's own kernels with `printf` do.
const RPC_KERNEL_REGISTERS: u32 = 64;

/// Registers a compute kernel with one conditional `gpu_println!` and the panic
/// handler may use: what nvcc 13 gives the same kernel with one `printf` on a
/// cold branch, or with an `assert` (24, measured on the H200 machine).
const PRINT_REGISTERS: u32 = 24;

/// The per-thread stack every kernel (with all it may call) must fit in: what
/// the CUDA backend provides (`MIN_STACK_BYTES`; CUDA's default is 1 KiB).
const STACK_BYTES: u32 = gpu_rpc::cuda::MIN_STACK_BYTES as u32;

/// Kernels allowed past the stack budget, each for its reason:
/// `rpc_bulk_local_kernel` holds a 2560-byte array on its stack on purpose
/// (the check that a stack slice longer than the direct threshold keeps the
/// packets); `gpu_check` raises the stack limit before launching it.
const BIG_STACK: [&str; 1] = ["rpc_bulk_local_kernel"];

/// Kernels whose own frame (the call's hot path; the out-of-line cold paths
/// it calls are separate functions) must not spill to local memory.
const NO_SPILL: [&str; 7] = [
    "rpc_noop_kernel",
    "rpc_incr_kernel",
    "rpc_sink_kernel",
    "saxpy_kernel",
    "saxpy_print_kernel",
    "fma_kernel",
    "fma_print_kernel",
];

/// Compute kernels without gpu_rpc and the same with a print and an
/// assert: the second is held to [`PRINT_REGISTERS`].
const WITH_PRINT: [(&str, &str); 2] = [
    ("saxpy_kernel", "saxpy_print_kernel"),
    ("fma_kernel", "fma_print_kernel"),
];

#[test]
fn example_kernels_fit_the_register_budget() {
    use rpc_build::footprint::{find_ptxas, measure_into};
    let Some(text) = ptx() else { return };
    let Some(ptxas) = find_ptxas() else {
        // CI installs it (`pip install nvidia-cuda-nvcc`) and sets this.
        assert!(
            std::env::var_os("GPU_RPC_REQUIRE_PTXAS").is_none(),
            "GPU_RPC_REQUIRE_PTXAS is set but no ptxas was found"
        );
        eprintln!("skipped: no ptxas to measure the kernels with (pip install nvidia-cuda-nvcc, or set PTXAS)");
        return;
    };
    let file = std::env::temp_dir().join(format!("gpu-examples-footprint-{}.ptx", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let cubin_file = file.with_extension("cubin");
    let kernels = measure_into(&ptxas, &file, 90, &cubin_file).unwrap_or_else(|e| panic!("{e}"));
    // The cubin ptxas made (what `gpu-run kernels.cubin` loads without a
    // JIT compile) is recognised as one, and declares the PTX's entries.
    let cubin = std::fs::read(&cubin_file).unwrap();
    let _ = std::fs::remove_file(&cubin_file);
    let image = gpu_rpc::cuda::Image::recognize(&cubin).unwrap_or_else(|e| panic!("the cubin: {e}"));
    assert_eq!(image.kind(), "cubin");
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let ptx_entries = gpu_rpc::cuda::Image::recognize(text.as_bytes())
        .unwrap()
        .entries()
        .unwrap();
    assert!(ptx_entries.len() >= 20, "{ptx_entries:?}");
    assert_eq!(
        sorted(image.entries().expect("the cubin's symbol table")),
        sorted(ptx_entries)
    );
    // Wrapped in a fatbin with the PTX by `fatbinary` (beside ptxas), as
    // scripts/gpu-build.sh does, it is recognised as one, and cut short it is
    // refused before it could reach the driver.
    let fatbinary = ptxas.with_file_name("fatbinary");
    if fatbinary.is_file() {
        let fat_file = cubin_file.with_extension("fatbin");
        std::fs::write(&cubin_file, &cubin).unwrap();
        let made = std::process::Command::new(&fatbinary)
            .arg("-64")
            .arg(format!("--create={}", fat_file.display()))
            .arg(format!("--image3=kind=elf,sm=90,file={}", cubin_file.display()))
            .arg(format!("--image3=kind=ptx,sm=90,file={}", file.display()))
            .status()
            .unwrap();
        let _ = std::fs::remove_file(&cubin_file);
        assert!(made.success(), "{} failed", fatbinary.display());
        let fat = std::fs::read(&fat_file).unwrap();
        let _ = std::fs::remove_file(&fat_file);
        let image = gpu_rpc::cuda::Image::recognize(&fat).unwrap_or_else(|e| panic!("the fatbin: {e}"));
        assert_eq!(image.kind(), "fatbin");
        let e = gpu_rpc::cuda::Image::recognize(&fat[..fat.len() / 2]).unwrap_err();
        assert!(e.to_string().contains("a damaged fatbin"), "{e}");
    } else {
        eprintln!("skipped: no fatbinary beside {} (the fatbin check)", ptxas.display());
    }
    let _ = std::fs::remove_file(&file);
    let mut table = format!("ptxas {} -arch=sm_90 on the example kernels:\n", ptxas.display());
    for k in &kernels {
        table.push_str(&format!("  {k}\n"));
    }
    eprint!("{table}");
    // CI shows the table without running this test a second time.
    if let Some(path) = std::env::var_os("GPU_RPC_FOOTPRINT_TABLE") {
        std::fs::write(&path, &table).unwrap_or_else(|e| panic!("{}: {e}", path.to_string_lossy()));
    }
    let get = |name: &str| {
        kernels
            .iter()
            .find(|k| k.name == name)
            .unwrap_or_else(|| panic!("ptxas reported no kernel {name}"))
    };
    let mut over = Vec::new();
    for k in &kernels {
        if k.registers > RPC_KERNEL_REGISTERS {
            over.push(format!(
                "{}: {} registers (budget {RPC_KERNEL_REGISTERS})",
                k.name, k.registers
            ));
        }
        if k.cumulative_stack > STACK_BYTES && !BIG_STACK.contains(&k.name.as_str()) {
            over.push(format!(
                "{}: {} B of stack (budget {STACK_BYTES})",
                k.name, k.cumulative_stack
            ));
        }
        if k.max_block() < 1024 {
            over.push(format!("{}: blocks of at most {} threads", k.name, k.max_block()));
        }
    }
    for name in NO_SPILL {
        let k = get(name);
        if k.spill_stores + k.spill_loads > 0 {
            over.push(format!(
                "{name}: spills {} B / reloads {} B in its own frame",
                k.spill_stores, k.spill_loads
            ));
        }
    }
    for (plain, print) in WITH_PRINT {
        let k = get(print);
        if k.registers > PRINT_REGISTERS {
            over.push(format!(
                "{print}: {} registers (budget {PRINT_REGISTERS}; {plain} without gpu_rpc: {})",
                k.registers,
                get(plain).registers
            ));
        }
    }
    assert!(
        over.is_empty(),
        "over the device-footprint budget:\n  {}",
        over.join("\n  ")
    );
}

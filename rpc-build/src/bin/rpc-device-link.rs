//! `rpc-device-link`: rustc's linker for GPU targets when `llvm-bitcode-linker` is not
//! installed. See `src/shim.rs` for what it accepts and runs.

#[path = "../shim.rs"]
#[allow(dead_code)]
mod shim;

fn main() -> std::process::ExitCode {
    shim::main()
}

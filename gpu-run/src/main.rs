//! gpu-run: being written.
fn main() {}

//! Compile errors of `#[gpu_rpc]` and `#[derive(Wire)]`: each case in
//! `tests/ui/*.rs` must fail to compile with the message and span recorded in
//! its `.stderr` file (regenerate with `TRYBUILD=overwrite`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

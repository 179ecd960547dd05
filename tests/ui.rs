//! Compile errors of `#[gpu_rpc]` and `#[derive(Wire)]`: each case in
//! `tests/ui/*.rs` must fail to compile with the message and span recorded in
//! its `.stderr` file (regenerate with `TRYBUILD=overwrite`); each case in
//! `tests/ui-pass/*.rs` must compile (they deny warnings where generated code
//! could cause one).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui-pass/*.rs");
}

/work/main/examples/gpu/kernels/target/device/sm_90/release/deps/rpc_macros-1628d9984c4e9ace.d: /work/main/rpc-macros/src/lib.rs /work/main/rpc-macros/src/check.rs /work/main/rpc-macros/src/derive_wire.rs /work/main/rpc-macros/src/expand.rs /work/main/rpc-macros/src/parse.rs

/work/main/examples/gpu/kernels/target/device/sm_90/release/deps/librpc_macros-1628d9984c4e9ace.so: /work/main/rpc-macros/src/lib.rs /work/main/rpc-macros/src/check.rs /work/main/rpc-macros/src/derive_wire.rs /work/main/rpc-macros/src/expand.rs /work/main/rpc-macros/src/parse.rs

/work/main/rpc-macros/src/lib.rs:
/work/main/rpc-macros/src/check.rs:
/work/main/rpc-macros/src/derive_wire.rs:
/work/main/rpc-macros/src/expand.rs:
/work/main/rpc-macros/src/parse.rs:

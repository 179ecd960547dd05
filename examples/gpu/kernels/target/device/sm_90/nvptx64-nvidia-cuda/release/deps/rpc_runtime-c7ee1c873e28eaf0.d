/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/rpc_runtime-c7ee1c873e28eaf0.d: /work/main/rpc-runtime/src/lib.rs /work/main/rpc-runtime/src/call.rs /work/main/rpc-runtime/src/lanes.rs /work/main/rpc-runtime/src/protocol.rs /work/main/rpc-runtime/src/sync.rs /work/main/rpc-runtime/src/wire.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/librpc_runtime-c7ee1c873e28eaf0.rlib: /work/main/rpc-runtime/src/lib.rs /work/main/rpc-runtime/src/call.rs /work/main/rpc-runtime/src/lanes.rs /work/main/rpc-runtime/src/protocol.rs /work/main/rpc-runtime/src/sync.rs /work/main/rpc-runtime/src/wire.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/librpc_runtime-c7ee1c873e28eaf0.rmeta: /work/main/rpc-runtime/src/lib.rs /work/main/rpc-runtime/src/call.rs /work/main/rpc-runtime/src/lanes.rs /work/main/rpc-runtime/src/protocol.rs /work/main/rpc-runtime/src/sync.rs /work/main/rpc-runtime/src/wire.rs

/work/main/rpc-runtime/src/lib.rs:
/work/main/rpc-runtime/src/call.rs:
/work/main/rpc-runtime/src/lanes.rs:
/work/main/rpc-runtime/src/protocol.rs:
/work/main/rpc-runtime/src/sync.rs:
/work/main/rpc-runtime/src/wire.rs:

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/gpu_rpc-b5df9bb87e02f3b8.d: /work/main/src/lib.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/libgpu_rpc-b5df9bb87e02f3b8.rlib: /work/main/src/lib.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/libgpu_rpc-b5df9bb87e02f3b8.rmeta: /work/main/src/lib.rs

/work/main/src/lib.rs:

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/gpu_example_kernels.d: src/lib.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/gpu_example_kernels.ptx: src/lib.rs

src/lib.rs:

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/gpu_example_services-aca11c43a175c523.d: /work/main/examples/gpu/services/src/lib.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/libgpu_example_services-aca11c43a175c523.rlib: /work/main/examples/gpu/services/src/lib.rs

/work/main/examples/gpu/kernels/target/device/sm_90/nvptx64-nvidia-cuda/release/deps/libgpu_example_services-aca11c43a175c523.rmeta: /work/main/examples/gpu/services/src/lib.rs

/work/main/examples/gpu/services/src/lib.rs:

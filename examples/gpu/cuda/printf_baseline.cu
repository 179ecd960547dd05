// CUDA's own device printf, the baseline of the printing benchmark: the same
// line as rpc_print_kernel, from every thread. The first parameter mirrors
// gpu_rpc's ClientDesc (unused) so one launcher runs both kernels.
// Built on the GPU machine: nvcc -arch=sm_90 -ptx printf_baseline.cu
#include <cstdio>

struct ClientDesc {
    unsigned long long shared, locks;
    unsigned int port_count, lane_size;
};

extern "C" __global__ void printf_kernel(ClientDesc) {
    unsigned int g = blockIdx.x * blockDim.x + threadIdx.x;
    printf("thread %u says hello\n", g);
}

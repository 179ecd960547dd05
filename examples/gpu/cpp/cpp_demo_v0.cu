// A CUDA C++ kernel built against an older header of `CppDemo` (scale took
// an i32): the host must refuse its calls with SignatureMismatch.
#include "cpp_demo_v0.cuh"

extern "C" __global__ void cpp_demo_v0_kernel(gpu_rpc::ClientDesc desc, unsigned* status, unsigned n) {
  CppDemoClient rpc(desc);
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid >= n) return;
  long long ignored = 0;
  gpu_rpc::CallResult r = rpc.try_scale(tid, 2, &ignored);
  status[tid] = r.status;
}

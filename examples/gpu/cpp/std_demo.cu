// A CUDA C++ kernel using gpu_rpc's standard services (`gpu_rpc::services::
// Std`) through `StdRpc::cuda_header()`: each thread writes a line to the
// host's stdout, reads the host's clock, and thread 0 exits with code 7.
#include "std.cuh"

__device__ unsigned put_decimal(char* out, unsigned x) {
  char tmp[10];
  unsigned n = 0;
  do {
    tmp[n++] = '0' + x % 10;
    x /= 10;
  } while (x != 0);
  for (unsigned i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

extern "C" __global__ void std_demo_kernel(gpu_rpc::ClientDesc desc, unsigned long long* clock, unsigned n) {
  StdClient host(desc);
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid >= n) return;
  char line[32] = "c++ thread ";
  unsigned len = 11 + put_decimal(line + 11, tid);
  line[len++] = '\n';
  gpu_rpc::Result<gpu_rpc::Unit, IoError> r = host.write(Fd{1}, gpu_rpc::Slice<unsigned char>{(const unsigned char*)line, len});
  clock[tid] = r.is_err ? 0 : host.time_ns();
  if (tid == 0) host.exit(7);
}

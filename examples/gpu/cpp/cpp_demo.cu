// A CUDA C++ kernel calling the Rust trait `CppDemo` (examples/gpu/services/
// src/cpp_demo.rs) through the header `CppDemoRpc::cuda_header()` generates.
// Written the way CUDA code is: thread ids from threadIdx/blockIdx, lanes that
// branch and loop different numbers of times, calls from several call sites.
// The host (src/bin/cpp_nvrtc.rs, tests/cpp.rs) checks every thread's results.
#include "cpp_demo.cuh"

// Results per thread.
#define SLOTS 12

__device__ unsigned write_decimal(char* out, unsigned x) {
  char tmp[10];
  unsigned n = 0;
  do {
    tmp[n++] = '0' + x % 10;
    x /= 10;
  } while (x != 0);
  for (unsigned i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

extern "C" __global__ void cpp_demo_kernel(gpu_rpc::ClientDesc desc, unsigned long long* results, unsigned n) {
  CppDemoClient rpc(desc);
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid >= n) return;
  unsigned long long* r = results + (unsigned long long)tid * SLOTS;

  // Two call sites of one method on diverged branches.
  if (threadIdx.x % 3 == 0) {
    r[0] = (unsigned long long)rpc.scale(tid, 3);
  } else {
    r[0] = (unsigned long long)rpc.scale(tid, -2);
  }

  // A struct both ways.
  Sample s;
  s.lane = tid;
  s.value = tid * 0.5;
  s.flags[0] = 1;
  s.flags[1] = (unsigned char)tid;
  s.flags[2] = 3;
  s.ok = tid % 2 == 1;
  Sample back = rpc.record(s);
  r[1] = back.lane;
  double v = back.value;
  unsigned long long bits = 0;
  for (int i = 0; i < 8; ++i) bits |= (unsigned long long)((const unsigned char*)&v)[i] << (8 * i);
  r[2] = bits;
  r[3] = back.flags[0] | (back.flags[1] << 8) | (back.flags[2] << 16) | ((unsigned)back.ok << 24);

  // A slice whose length differs per lane (0 .. 49 elements).
  unsigned data[50];
  unsigned len = tid % 50;
  for (unsigned i = 0; i < len; ++i) data[i] = tid + i;
  r[4] = rpc.checksum(gpu_rpc::Slice<unsigned>{data, len});

  // A string built on the device.
  char name[16] = "lane ";
  unsigned nlen = 5 + write_decimal(name + 5, tid);
  r[5] = rpc.greet(gpu_rpc::Str(name, nlen));

  // An out-buffer the host fills, of a length per lane.
  unsigned short out[41];
  unsigned olen = tid % 40 + 1;
  rpc.fill(tid, gpu_rpc::MutSlice<unsigned short>{out, olen});
  unsigned long long h = 0;
  for (unsigned i = 0; i < olen; ++i) h += (unsigned long long)out[i] * (i + 1);
  r[6] = h;

  // A slice of structs and an Option back.
  Sample many[4];
  unsigned m = tid % 4;
  for (unsigned i = 0; i < m; ++i) {
    many[i] = s;
    many[i].ok = (i + tid) % 2 == 0;
  }
  gpu_rpc::Option<unsigned> count = rpc.count_ok(gpu_rpc::Slice<Sample>{many, m});
  r[7] = count.some ? count.value : 0xffffffffull;

  // A Result back, through the try_ form.
  gpu_rpc::Result<unsigned, int> half;
  gpu_rpc::CallResult cr = rpc.try_halve(tid, &half);
  r[8] = cr.ok() ? (half.is_err ? (unsigned long long)(long long)half.err : half.ok) : 0xdeadull;

  // Lanes leave a loop at different iterations, calling as they go.
  long long acc = 0;
  for (unsigned i = 0; i < tid % 5; ++i) {
    if (i % 2 == 0) {
      acc += rpc.scale(i, 1);
    } else {
      acc += rpc.scale(i, 10);
    }
  }
  r[9] = (unsigned long long)acc;

  // Only some lanes send a note.
  if (tid % 7 != 0) rpc.note(tid);
  r[10] = 1;
}


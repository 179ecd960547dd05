#!/usr/bin/env bash
# Run the GPU checks (and, with --bench, the benchmarks) on a machine with an
# NVIDIA GPU, from the folder scripts/gpu-build.sh filled (default .gpu/).
# Prints what it runs and what it saw; exits non-zero if a check failed.
set -u
dir=${GPU_DIR:-.gpu}
bench=0; [ "${1:-}" = --bench ] && bench=1
fail=0
step() { echo; echo "=== $*"; }
expect() { # expect CODE CMD...: run CMD, require exit code CODE
  local want=$1; shift
  "$@"; local rc=$?
  if [ "$rc" -ne "$want" ]; then echo "FAIL: exit code $rc, expected $want: $*"; fail=1; else echo "ok: exit code $rc"; fi
}
step "device"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader || true

step "CUDA backend tests (rpc-runtime)"
ran=0
for t in "$dir"/test-cuda_*; do
  [ -x "$t" ] || continue
  GPU_RPC_TEST_PTX="$dir/kernels.ptx" expect 0 "$t" --test-threads=1
  ran=$((ran + 1))
done
# gpu-build.sh always copies them: none here is a broken build, not a pass.
if [ "$ran" = 0 ]; then echo "FAIL: no CUDA backend test binaries (test-cuda_*) in $dir"; fail=1; fi

step "gpu_check: seeds' test, port counts, partial warps, printing, streams"
expect 0 "$dir/gpu_check"

step "gpu_conform: randomized divergent-warp conformance suite (20 seeds x 7 block sizes, checked against a CPU model)"
expect 0 "$dir/gpu_conform"

step "hello_gpu (expects exit code 3)"
expect 3 "$dir/hello_gpu" --blocks 2 --threads 64

step "cudarc_interop: kernels launched with cudarc on two streams, served by one gpu_rpc::cuda::Serve"
expect 0 "$dir/cudarc_interop"

step "cpp_nvrtc: a CUDA C++ kernel, compiled with nvrtc at run time, calls a Rust trait; an old header is refused"
# cudarc loads libnvrtc by name: put the toolkit's copy on the search path.
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda/targets/*/lib/libnvrtc.so* 2>/dev/null | head -1)
if [ -n "$nvrtc" ]; then export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
expect 0 "$dir/cpp_nvrtc"

if [ -x "$dir/gpu-run" ]; then
  step "gpu-run on gpu_main (prints, exits with 3)"
  expect 3 "$dir/gpu-run" --threads 32 --blocks 2 "$dir/kernels.ptx" first "second arg"
  step "gpu-run on a cubin and on a fatbin of the same kernels (sm_90, made by gpu-build.sh's ptxas: no JIT compile at load; expects 3)"
  if [ -f "$dir/kernels.cubin" ]; then
    TIMEFORMAT="gpu-run took %R s (user %U s)"
    time expect 3 "$dir/gpu-run" --threads 32 "$dir/kernels.cubin" cubin
    if [ -f "$dir/kernels.fatbin" ]; then
      time expect 3 "$dir/gpu-run" --threads 32 "$dir/kernels.fatbin" fatbin
    else
      echo "skipped: no kernels.fatbin (gpu-build.sh's fatbinary failed)"
    fi
    # A kernel name the image lacks: the error lists the image's entries
    # (the cubin's symbol table; for the fatbin, the driver's list).
    for image in kernels.cubin kernels.fatbin; do
      [ -f "$dir/$image" ] || continue
      expect 1 "$dir/gpu-run" --kernel no_such_kernel "$dir/$image" 2> /tmp/gpu-run-entries.txt
      if grep -q "not found in module (its entry points: .*gpu_main" /tmp/gpu-run-entries.txt; then
        echo "$image: $(cut -c1-150 /tmp/gpu-run-entries.txt)..."
      else
        echo "FAIL: $image: the error does not list gpu_main among the entries:"; cat /tmp/gpu-run-entries.txt; fail=1
      fi
    done
  else
    echo "skipped: no kernels.cubin (gpu-build.sh found no ptxas)"
  fi
  step "gpu-run with 1024-thread blocks, 132 of them (every SM of an H100/H200; expects 3)"
  quiet() { "$@" > /tmp/gpu-run-1024.txt; }
  expect 3 quiet "$dir/gpu-run" --threads 1024 --blocks 132 "$dir/kernels.ptx"
  echo "$(wc -l < /tmp/gpu-run-1024.txt) lines printed:"; head -3 /tmp/gpu-run-1024.txt; tail -1 /tmp/gpu-run-1024.txt
  step "gpu-run --all-devices (every visible GPU at once, one server pool; expects 3)"
  expect 3 "$dir/gpu-run" --all-devices --threads 32 "$dir/kernels.ptx"
  step "gpu-run error paths"
  expect 1 "$dir/gpu-run" "$dir/missing.ptx"
  expect 1 "$dir/gpu-run" --kernel no_such_kernel "$dir/kernels.ptx"
  expect 2 "$dir/gpu-run" --threads 0 "$dir/kernels.ptx"
  step "gpu-run on a kernel that panics on purpose: each of the 8 lanes reported once, with its location, exit code 101"
  panics() { "$@" 2> /tmp/gpu-run-panic.txt; local rc=$?; cat /tmp/gpu-run-panic.txt; return $rc; }
  expect 101 panics "$dir/gpu-run" --threads 4 --blocks 2 --kernel panic_demo_kernel "$dir/kernels.ptx"
  n=$(grep -c "kernel panicked at src/services_demo.rs:" /tmp/gpu-run-panic.txt)
  if [ "$n" -ne 8 ]; then echo "FAIL: $n panic reports, expected 8 (one per lane)"; fail=1; else echo "ok: 8 panic reports"; fi
  step "gpu-run reading a host file from the kernel (first line of the PTX itself), then a missing one"
  expect 0 "$dir/gpu-run" --kernel file_demo_kernel "$dir/kernels.ptx" "$dir/kernels.ptx"
  expect 0 "$dir/gpu-run" --kernel file_demo_kernel "$dir/kernels.ptx" /nonexistent/file
  # One host thread writing 1 GiB from memory already filled, 32 MiB per
  # write() as gpu-run's file_bulk_kernel hands the host per call: what one
  # writer to one file gets on this file system, without a GPU.
  host_write() {
    python3 -c 'import os, sys, time
b = bytes([7]) * (32 << 20)
# Plain write()s, and each range reserved just before its write (what the
# standard services do for a write_fd of 1 MiB or more), alternated twice.
for reserve in (False, True, False, True):
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    for i in range(32):
        if reserve:
            os.posix_fallocate(fd, i * len(b), len(b))
        os.write(fd, b)
    os.close(fd)
    os.remove(sys.argv[1])
    print("one host thread, write() of 32 MiB x 32 from memory%s: %.2f GB/s" % (", each range reserved first (posix_fallocate)" if reserve else "", (1 << 30) / (time.perf_counter() - t) / 1e9))' "$1" || true
  }
  step "gpu-run: one warp writes 1 GiB to a host file in 1 MiB slices and reads it back, every word checked (exit code 0); then the host alone writing 1 GiB (dd, same file system) for comparison"
  bulk=$(mktemp -d /tmp/gpu-run-bulk.XXXXXX)
  expect 0 "$dir/gpu-run" --threads 32 --allow-write "$bulk" --allow-read "$bulk" --kernel file_bulk_kernel "$dir/kernels.ptx" "$bulk/file.bin"
  ls -l "$bulk/file.bin"
  dd if=/dev/zero of="$bulk/dd.bin" bs=64M count=16 2>&1 | tail -1
  host_write "$bulk/host.bin"
  rm -rf "$bulk"
  # The same in memory (tmpfs), where the file system is not the limit.
  free_kib=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)
  if [ -n "$free_kib" ] && [ "$free_kib" -gt 3000000 ]; then
    step "gpu-run: the same 1 GiB to a file on /dev/shm (tmpfs), read back and checked; then dd to /dev/shm"
    bulk=$(mktemp -d /dev/shm/gpu-run-bulk.XXXXXX)
    expect 0 "$dir/gpu-run" --threads 32 --allow-write "$bulk" --allow-read "$bulk" --kernel file_bulk_kernel "$dir/kernels.ptx" "$bulk/file.bin"
    ls -l "$bulk/file.bin"
    rm -f "$bulk/file.bin"
    dd if=/dev/zero of="$bulk/dd.bin" bs=64M count=16 2>&1 | tail -1
    rm -f "$bulk/dd.bin"
    host_write "$bulk/host.bin"
    rm -rf "$bulk"
  else
    echo "skipped: /dev/shm has less than 3 GB free (or is missing): the 1 GiB file in memory"
  fi
fi

if [ "$bench" = 1 ]; then
  step "benchmarks"
  "$dir/gpu_bench" all || fail=1
  step "printing: gpu_rpc print_stderr vs CUDA printf, 100096 lines each, to a file"
  "$dir/gpu_bench" print-rpc /tmp/print-rpc.txt || fail=1
  # Four launches with a lock per line: every thread's line four times, whole.
  if [ "$(wc -l < /tmp/print-rpc.txt)" = 400384 ] && [ "$(sort -u /tmp/print-rpc.txt | grep -c '^thread [0-9]* says hello$')" = 100096 ]; then
    echo "ok: 400384 lines, every thread's line whole"
  else
    echo "FAIL: print-rpc wrote $(wc -l < /tmp/print-rpc.txt) lines, $(sort -u /tmp/print-rpc.txt | wc -l) distinct (expected 400384, 100096)"; fail=1
  fi
  # The standard services' file of the last launch (8 server threads): every line once, whole.
  if [ "$(wc -l < /tmp/print-rpc.txt.std)" = 100096 ] && [ "$(sort -u /tmp/print-rpc.txt.std | grep -c '^thread [0-9]* says hello$')" = 100096 ]; then
    echo "ok: the standard services' file: 100096 lines, every thread's line once, whole"
  else
    echo "FAIL: the standard services' file has $(wc -l < /tmp/print-rpc.txt.std) lines, $(sort -u /tmp/print-rpc.txt.std | wc -l) distinct (expected 100096)"; fail=1
  fi
  if command -v nvcc >/dev/null; then
    nvcc -arch=sm_90 -ptx -o /tmp/printf_baseline.ptx "$dir/printf_baseline.cu" &&
      "$dir/gpu_bench" print-cuda /tmp/printf_baseline.ptx > /tmp/print-cuda.txt || fail=1
    wc -l /tmp/print-cuda.txt
  else
    echo "nvcc not found: CUDA printf baseline skipped"
  fi
  if [ -x "$dir/host-bench" ]; then
    step "the server's own cost per warp-call on this machine's host (benches/host.rs, a synthetic device, no GPU)"
    "$dir/host-bench" || fail=1
  fi
fi
echo
[ "$fail" = 0 ] && echo "ALL GPU CHECKS PASSED" || echo "SOME GPU CHECKS FAILED"
exit $fail

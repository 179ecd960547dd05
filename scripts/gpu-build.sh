#!/usr/bin/env bash
# Build everything the GPU checks need into .gpu/ (git-ignored), on a machine
# with the Rust toolchains (see README "GPU"): the example host programs with
# their embedded PTX, gpu-run, the CUDA backend's test binaries, the kernels'
# PTX and the CUDA printf baseline source. Then run scripts/gpu-check.sh on a
# machine with an NVIDIA GPU (only the driver is needed there).
# GPU_OUT=.gpu-x builds into another folder (git-ignored too), e.g. to keep
# two builds side by side for an A/B run; run them with GPU_DIR=.gpu-x.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${GPU_OUT:-.gpu}
rm -rf "$out" && mkdir -p "$out"
bins=(-p gpu-examples)
if [ "${GPU_RUN:-1}" = 1 ]; then bins+=(-p gpu-run); fi
cargo build --release "${bins[@]}"
for b in gpu_check gpu_conform hello_gpu cudarc_interop cpp_nvrtc gpu_bench gpu-run; do
  [ -f "target/release/$b" ] && cp "target/release/$b" "$out/"
done
cp "$(ls -t target/release/build/gpu-examples-*/out/kernels.ptx | head -1)" "$out/kernels.ptx"
cp examples/gpu/cuda/printf_baseline.cu "$out/"
# The same kernels as a cubin and a fatbin for sm_90 (H100/H200), where ptxas
# is here (PTXAS, or pip's nvidia-cuda-nvcc): gpu-check.sh runs gpu-run on
# them, images the driver loads without its JIT compile (ptxas takes about
# 40 s on this PTX).
ptxas=${PTXAS:-$(command -v ptxas || python3 -c 'import nvidia, os
for d in nvidia.__path__:
    p = os.path.join(d, "cu13", "bin", "ptxas")
    if os.path.isfile(p): print(p); break' 2>/dev/null || true)}
if [ -n "$ptxas" ] && [ -x "$ptxas" ]; then
  if "$ptxas" -arch=sm_90 -o "$out/kernels.cubin" "$out/kernels.ptx"; then
    # The fatbin holds the PTX too, so a GPU other than sm_90 JIT-compiles it.
    "$(dirname "$ptxas")/fatbinary" -64 --create="$out/kernels.fatbin" \
      --image3=kind=elf,sm=90,file="$out/kernels.cubin" --image3=kind=ptx,sm=90,file="$out/kernels.ptx" ||
      { echo "fatbinary failed: no kernels.fatbin"; rm -f "$out/kernels.fatbin"; }
  else
    echo "ptxas failed: no kernels.cubin, gpu-check.sh skips its cubin steps"; rm -f "$out/kernels.cubin"
  fi
else
  echo "no ptxas (pip install nvidia-cuda-nvcc, or set PTXAS): no kernels.cubin, gpu-check.sh skips its cubin steps"
fi
# The CUDA backend's GPU tests, as standalone executables.
cargo test --release -p rpc-runtime --features cuda --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    try: m=json.loads(l)
    except Exception: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"].startswith("cuda"):
        print(m["executable"])' |
  while read -r exe; do cp "$exe" "$out/test-$(basename "$exe" | sed 's/-[0-9a-f]*$//')"; done
# The host's own cost per warp-call (benches/host.rs, no GPU), run by
# gpu-check.sh --bench on the GPU machine's host in the same run as the GPU
# numbers.
cargo bench --bench host --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    try: m=json.loads(l)
    except Exception: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="host":
        print(m["executable"])' |
  while read -r exe; do cp "$exe" "$out/host-bench"; done
for f in "$out"/*; do case "$f" in *.ptx|*.cu|*.sh|*.cubin|*.fatbin) ;; *) strip --strip-debug "$f" ;; esac; done
cp scripts/gpu-check.sh "$out/"
ls -la "$out"

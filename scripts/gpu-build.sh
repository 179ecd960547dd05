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
for f in "$out"/*; do case "$f" in *.ptx|*.cu|*.sh) ;; *) strip --strip-debug "$f" ;; esac; done
cp scripts/gpu-check.sh "$out/"
ls -la "$out"

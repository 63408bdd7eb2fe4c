#!/usr/bin/env bash
# One-shot GPU check of the CUDA backend, for a lent GPU machine that may have
# no Go toolchain. Build the test binary beforehand, on any machine, from the
# repository root:
#
#   CGO_ENABLED=0 go test -c -o gpu.test ./trainer/backend
#
# then, on the GPU machine (repository root, binary carried along):
#
#   trainer/backend/gpu_check.sh ./gpu.test
#
# It runs every test of the package (the CUDA ones included: they fail, not
# skip, when a GPU is present but the backend does not open), then
# BenchmarkStep on both backends. Outputs go to $OUT (or a temporary folder):
# nvidia-smi.txt, tests.txt, bench.txt. Exit status: non-zero if tests failed.
set -uo pipefail
bin=${1:?usage: gpu_check.sh PATH/TO/gpu.test [benchtime, default 20x]}
benchtime=${2:-20x}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
cd "$(dirname "$0")" # the tests read kernels/kernels.cu relative to the package

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (rc $?)" >>"$out/nvidia-smi.txt"
head -15 "$out/nvidia-smi.txt"

timeout 300 "$bin" -test.count=1 -test.v -test.timeout 280s >"$out/tests.txt" 2>&1
trc=$?
grep -E '^(=== RUN|--- |    |PASS|FAIL|ok)' "$out/tests.txt" | grep -vE '^=== RUN' | tail -60
echo "tests rc=$trc"

timeout 240 "$bin" -test.run '^$' -test.bench '^BenchmarkStep$' -test.benchtime "$benchtime" -test.v >"$out/bench.txt" 2>&1
brc=$?
grep -E 'Benchmark|samples/s|SKIP|skip|FAIL|ok' "$out/bench.txt"
echo "bench rc=$brc; outputs in $out"
[ "$trc" -eq 0 ] && [ "$brc" -eq 0 ]

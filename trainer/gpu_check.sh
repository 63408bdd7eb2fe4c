#!/usr/bin/env bash
# One-call GPU check of the trainer's model (issue 27, item 6), for a lent GPU
# machine that may have no Go toolchain. Build beforehand, on any machine, from
# the repository root:
#
#   CGO_ENABLED=0 go test -c -o gpu.test ./trainer/backend
#   CGO_ENABLED=0 go test -c -o trainer.test ./trainer
#   CGO_ENABLED=0 go build -o bin/harnessflow ./cmd/harnessflow
#
# then, on the GPU machine (repository root, binaries carried along):
#
#   trainer/gpu_check.sh ./gpu.test ./trainer.test ./bin/harnessflow
#
# In order: the backend's own check (trainer/backend/gpu_check.sh: every
# operation's CPU parity, BenchmarkStep); trainer.Model's CPU vs CUDA parity
# of ten training steps and of a checkpoint written on the GPU and restored on
# both (TestModelCUDAParityWithCPU); /v1/score of a trainer on the GPU against
# the same checkpoint on the CPU (TestScoreOnDevice); the default model's
# training steps on both devices in one process (BenchmarkTrainStepDevices);
# and `harnessflow bench train` (samples/s and /v1/score latency) on cpu and
# cuda alternately, A B A B. Outputs go to $OUT (or a temporary folder).
# Exit status: non-zero if any check failed. Budget: about 6 minutes.
set -uo pipefail
backend_bin=${1:?usage: gpu_check.sh gpu.test trainer.test harnessflow}
trainer_bin=${2:?usage: gpu_check.sh gpu.test trainer.test harnessflow}
hf=${3:?usage: gpu_check.sh gpu.test trainer.test harnessflow}
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
backend_bin=$(abs "$backend_bin") trainer_bin=$(abs "$trainer_bin") hf=$(abs "$hf")
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
rc=0

"$here/backend/gpu_check.sh" "$backend_bin" 20x || rc=1

cd "$here" # the package directory, as go test runs its tests
timeout 240 "$trainer_bin" -test.count=1 -test.v -test.run '^(TestModelCUDAParityWithCPU|TestScoreOnDevice)$' -test.timeout 220s >"$OUT/trainer-tests.txt" 2>&1 || rc=1
grep -E '^(--- |    |PASS|FAIL|ok)' "$OUT/trainer-tests.txt" | tail -20
if grep -q -- '--- SKIP' "$OUT/trainer-tests.txt"; then
	echo "trainer GPU tests skipped: no GPU seen"
	rc=1
fi

timeout 120 "$trainer_bin" -test.run '^$' -test.bench '^BenchmarkTrainStepDevices$' -test.benchtime 20x >"$OUT/trainer-bench.txt" 2>&1 || rc=1
grep -E 'Benchmark|FAIL' "$OUT/trainer-bench.txt"

for dev in cpu cuda cpu cuda; do
	echo "== bench train --device $dev"
	timeout 60 "$hf" bench train --device "$dev" --steps 20 --requests 200 2>&1 | tee -a "$OUT/bench-train-$dev.txt" | tail -4 || rc=1
done
echo "gpu check rc=$rc; outputs in $OUT"
exit $rc

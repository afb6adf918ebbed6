#!/usr/bin/env bash
# The first figures on a GPU, in one prepared run from the repository root.
#
#   bash scripts/gpu_check.sh [--wheels DIR] [--out DIR] [--work DIR] [--budget-s S]
#                             [--skip PHASE,...] [--cpu]
#   bash scripts/gpu_check.sh --fetch-wheels DIR     # on a machine that reaches PyPI: fill DIR
#
# On a GPU machine (the H200 image: CUDA torch, transformers, peft, tensorboard, matplotlib,
# numpy, networkx, pytest; no gymnasium, hydra-core, omegaconf, vLLM) it
#   1. install   installs the carried wheels (DIR, or $GPU_CHECK_WHEELS) into /tmp/agentrl-site
#                and agentrl itself with `pip install --no-deps -e .` (PYTHONPATH is the checkout's
#                root whatever happens, so a failed editable install costs nothing);
#   2. info      prints the device, the versions and the free GPU memory (info.json);
#   3. model     builds a random-initialised Qwen2.5-0.5B-shaped model folder (the tiny model's
#                tokenizer; scripts/gpu_check.py model) for model=path;
#   4. train     python -m agentrl.train model=path on it, Sokoban, 5 iterations, trainer.device=cuda,
#                bf16 autocast over fp32 master weights, gradient checkpointing, constrained
#                decoding (a random model's tokens are mostly outside the tokenizer's 512);
#   5. resume    torchrun --nproc_per_node=1 -m agentrl.train ... trainer.resume=<train run>: 2 more
#                iterations from the checkpoint of iteration 5;
#   6. bench_*   scripts/bench_fsdp_gpu.py at Qwen2.5-0.5B's and Qwen2.5-1.5B's shapes (bf16, FSDP2
#                on one rank, gradient checkpointing): hf rollout tokens/s at batch 128, PPO update
#                tokens/s and MFU against 790 TFLOP/s, weight-sync time, peak memory;
#   7. pytest_gpu the test files that use the `gpu` marker, `pytest -m gpu` (none: recorded so);
#   8. report    $OUT/gpu_check.json (every phase's status, the figures, the checks) and
#                $OUT/gpu_check.log (every phase's output); exit 0 when every check passed.
# Each phase runs under `timeout`, capped by its own limit and by what is left of --budget-s
# (480 s: the whole run stays well inside a 10-minute device call, so a rerun fits); a phase whose
# prerequisite failed is recorded as needs:<phase>, one past the budget as no_time.
#
# --cpu: the same phases at tiny shapes on the CPU (what tests/test_gpu_check.py runs in CI):
# a tiny-shaped model, 2 iterations then 1 resumed, the benchmark at the tiny shape; no wheel is
# installed unless --wheels is given.
#
# --out (default $OUT, else outputs/gpu_check) gets only gpu_check.json and gpu_check.log; the
# model, the runs, their checkpoints (GBs at 0.5B) and each phase's log stay in --work (default
# $GPU_CHECK_WORK, else /tmp/agentrl_gpu_check). --skip takes phase names (install, info, model,
# train, resume, bench_<shape>, pytest_gpu), e.g. for a rerun of what failed.
# Environment: PYTHON (default python3, else python), GPU_CHECK_WHEELS (as --wheels),
# GPU_CHECK_TRAIN_ARGS (more key=value overrides for both runs).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-$(command -v python3 || command -v python)}
MODE=gpu
WHEELS=${GPU_CHECK_WHEELS:-}
BUDGET=480
SKIP=,
BLOCKED=
OUTDIR=${OUT:-$ROOT/outputs/gpu_check}
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/agentrl_gpu_check}

# The wheels the H200 image lacks (pure Python; exact versions tested with this checkout).
# antlr4-python3-runtime has no wheel on PyPI: --fetch-wheels builds it.
WHEEL_SPECS=(gymnasium==1.4.0 farama-notifications==0.0.6 hydra-core==1.3.8 omegaconf==2.3.1
             setuptools==78.1.1 wheel==0.45.1)
ANTLR=antlr4-python3-runtime==4.9.3

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

fetch_wheels() {  # run where PyPI is reachable; carry the folder to the device
    local dir=$1
    mkdir -p "$dir" || return 1
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$dir" \
        "${WHEEL_SPECS[@]}" || return 1
    "$PY" -m pip wheel --no-deps -w "$dir" "$ANTLR" || return 1
    ls -l "$dir"
}

install() {  # the carried wheels into /tmp/agentrl-site (on PYTHONPATH), then agentrl itself
    if [[ -n $WHEELS ]]; then
        local wheels=()
        for w in "$WHEELS"/*.whl; do  # setuptools and wheel only build the editable install
            [[ $(basename "$w") == setuptools-* || $(basename "$w") == wheel-* ]] || wheels+=("$w")
        done
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/agentrl-site "${wheels[@]}" || return 1
        # editable, no dependencies; build isolation takes setuptools and wheel from the folder
        "$PY" -m pip install -q --no-deps --no-index --find-links "$WHEELS" -e "$ROOT" \
            || echo "note: the editable install failed; agentrl is imported from PYTHONPATH"
    fi
    "$PY" - <<'EOF'
import importlib.util

need = ("torch", "transformers", "numpy", "networkx", "gymnasium", "hydra", "omegaconf")
missing = [name for name in need if importlib.util.find_spec(name) is None]
spec = importlib.util.find_spec("agentrl")
print("agentrl from", spec and spec.origin)
if missing or spec is None:
    raise SystemExit(f"missing: {missing + ['agentrl'] * (spec is None)} (carry wheels: --wheels)")
EOF
}

case ${1:-} in
    --_install) install; exit ;;
esac
while (($#)); do
    case $1 in
        --cpu) MODE=cpu ;;
        --wheels) WHEELS=$2; shift ;;
        --out) OUTDIR=$2; shift ;;
        --work) WORK=$2; shift ;;
        --budget-s) BUDGET=$2; shift ;;
        --skip) SKIP=,$2,; shift ;;
        --fetch-wheels) fetch_wheels "$2"; exit ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

SITE=
[[ -n $WHEELS ]] && SITE=/tmp/agentrl-site:  # where install puts the carried wheels
export PYTHONPATH="$SITE$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
if [[ -n $WHEELS ]]; then
    WHEELS=$(cd "$WHEELS" && pwd) || { echo "no wheel folder $WHEELS" >&2; exit 2; }
fi
mkdir -p "$OUTDIR" "$WORK" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(cd "$WORK" && pwd)
rm -rf "$WORK/runs" "$WORK/model" "$WORK/logs" "$WORK"/bench_*.json "$WORK/info.json"
mkdir -p "$WORK/logs" "$WORK/runs" || exit 2
LOG=$OUTDIR/gpu_check.log
: >"$LOG"
: >"$WORK/phases.tsv"
STARTED=$(date +%s)
DEADLINE=$((STARTED + BUDGET))

if [[ $MODE == gpu ]]; then
    DEVICE=cuda SHAPES=(qwen2.5-0.5b qwen2.5-1.5b) MODEL_SHAPE=qwen2.5-0.5b MODEL_DTYPE=bfloat16
    TRAIN_ITS=5 RESUME_ITS=2 MODEL_VOCAB=()
    RUN_ARGS=(rollout.tasks_per_iter=8 rollout.group_size=8 env.max_steps=5 env.eval_episodes=16
              model.max_new_tokens=32 model.micro_batch_tokens=8192 trainer.epochs=1
              trainer.minibatch_size=64 trainer.micro_batch_size=32 trainer.lr=1e-6)
    BENCH_ARGS=(--device cuda --budget-s 30)
    #        install info model train resume bench bench pytest
    LIMITS=(150 60 90 180 120 120 150 90)
else
    DEVICE=cpu SHAPES=(tiny) MODEL_SHAPE=tiny MODEL_DTYPE=float32 TRAIN_ITS=2 RESUME_ITS=1
    MODEL_VOCAB=(--vocab-size 151936)  # Qwen2.5's rows beyond the tokenizer's, as on the GPU
    RUN_ARGS=(rollout.tasks_per_iter=2 rollout.group_size=2 env.max_steps=3 env.eval_episodes=2
              model.max_new_tokens=8 trainer.minibatch_size=8 trainer.micro_batch_size=8)
    BENCH_ARGS=(--device cpu --prompts 4 --prompt-len 16 --new-tokens 4 --repeats 1
                --micro-batch 4 --budget-s 10)
    LIMITS=(150 60 60 120 120 60 60 90)
fi
read -ra EXTRA <<<"${GPU_CHECK_TRAIN_ARGS:-}"

note() { echo "$*" | tee -a "$LOG"; }

# phase NAME LIMIT CMD...: run CMD under timeout (LIMIT, or what is left of the budget); record
# "NAME<TAB>rc<TAB>seconds<TAB>limit" in phases.tsv; its output goes to logs/NAME.log and the log.
phase() {
    local name=$1 cap=$2 rc t0 dt left limit
    shift 2
    if [[ -n $BLOCKED ]]; then
        printf '%s\tneeds:%s\t0\t0\n' "$name" "$BLOCKED" >>"$WORK/phases.tsv"
        note "== $name: not run (needs $BLOCKED)"
        return 1
    fi
    if [[ $SKIP == *,$name,* ]]; then
        printf '%s\tskipped\t0\t0\n' "$name" >>"$WORK/phases.tsv"
        note "== $name: skipped"
        return 1
    fi
    left=$((DEADLINE - $(date +%s)))
    limit=$((cap < left ? cap : left))
    if ((limit < 10)); then
        printf '%s\tno_time\t0\t%s\n' "$name" "$limit" >>"$WORK/phases.tsv"
        note "== $name: no time left in the ${BUDGET}s budget"
        return 1
    fi
    note "== $name (at most ${limit}s): $*"
    t0=$(date +%s%N)
    timeout -k 15 "$limit" "$@" >"$WORK/logs/$name.log" 2>&1
    rc=$?
    dt=$((($(date +%s%N) - t0) / 1000000))  # ms
    dt=$((dt / 1000)).$((dt % 1000 / 100))
    cat "$WORK/logs/$name.log" >>"$LOG"
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$dt" "$limit" >>"$WORK/phases.tsv"
    note "   $name: rc=$rc in ${dt}s"
    if ((rc != 0)); then  # the end of a failure, here, so a device call's output tail shows it
        tail -n 25 "$WORK/logs/$name.log" | sed 's/^/   | /'
    fi
    return $rc
}

needs() {  # needs NAME PHASE: record NAME as not run because PHASE failed
    printf '%s\tneeds:%s\t0\t0\n' "$1" "$2" >>"$WORK/phases.tsv"
    note "== $1: not run (needs $2, which did not pass)"
}

# The runs' keys; everything else is the recipe's defaults (GiGPO, the hf backend, PPO).
train_argv() {  # train_argv RUN_DIR ITERATIONS [more overrides]: fills ARGV
    local run=$1 its=$2
    shift 2
    ARGV=(-m agentrl.train model=path "model.name=$WORK/model" model.constrained=true
          model.gradient_checkpointing=true "trainer.device=$DEVICE" "trainer.iterations=$its"
          trainer.checkpoint_every=0 trainer.eval_every=0 trainer.progress=false
          'trainer.loggers=[]' trainer.plot=false "output_dir=$run" "hydra.run.dir=$run"
          "${RUN_ARGS[@]}" "${EXTRA[@]}" "$@")
}

note "gpu_check ($MODE) in $ROOT at $(date -Is); output: $OUTDIR, work: $WORK; budget ${BUDGET}s"
export GPU_CHECK_WHEELS=$WHEELS
phase install "${LIMITS[0]}" bash "$0" --_install  # without wheels: checks the imports only
if [[ $MODE == gpu ]] && command -v nvidia-smi >/dev/null; then
    nvidia-smi >>"$LOG" 2>&1
fi
phase info "${LIMITS[1]}" "$PY" scripts/gpu_check.py info "$WORK/info.json"
if [[ $MODE == gpu ]] && ! grep -q '"cuda_available": true' "$WORK/info.json" 2>/dev/null; then
    note "no CUDA device here (see info): the GPU phases are not run; --cpu runs the CPU form"
    BLOCKED=cuda
fi

if phase model "${LIMITS[2]}" "$PY" scripts/gpu_check.py model "$WORK/model" \
    --shape "$MODEL_SHAPE" --dtype "$MODEL_DTYPE" "${MODEL_VOCAB[@]}"; then
    train_argv "$WORK/runs/train" "$TRAIN_ITS"
    if phase train "${LIMITS[3]}" "$PY" "${ARGV[@]}"; then
        train_argv "$WORK/runs/resume" $((TRAIN_ITS + RESUME_ITS)) \
            "trainer.resume=$WORK/runs/train"
        phase resume "${LIMITS[4]}" "$PY" -m torch.distributed.run --standalone \
            --nproc_per_node=1 "${ARGV[@]}"
    else
        needs resume train
    fi
else
    needs train model
    needs resume model
fi

i=5
for shape in "${SHAPES[@]}"; do
    phase "bench_$shape" "${LIMITS[$i]}" "$PY" scripts/bench_fsdp_gpu.py --shape "$shape" \
        "${BENCH_ARGS[@]}" --out "$WORK/bench_$shape.json"
    i=$((i + 1))
done

mapfile -t GPU_TESTS < <(grep -rlE --include='*.py' 'mark\.gpu\b' tests | sort)
if ((${#GPU_TESTS[@]})); then
    phase pytest_gpu "${LIMITS[7]}" "$PY" -m pytest -q -m gpu -p no:cacheprovider "${GPU_TESTS[@]}"
else
    printf 'pytest_gpu\tnone\t0\t0\n' >>"$WORK/phases.tsv"
    note "== pytest_gpu: no test uses the gpu marker"
fi

shapes=$(
    IFS=,
    echo "${SHAPES[*]}"
)
"$PY" scripts/gpu_check.py report "$WORK" "$OUTDIR/gpu_check.json" --mode "$MODE" \
    --train-iterations "$TRAIN_ITS" --resume-iterations "$RESUME_ITS" --shapes "$shapes" \
    --budget-s "$BUDGET" --started "$STARTED" | tee -a "$LOG"
rc=${PIPESTATUS[0]}
note "gpu_check: $( ((rc == 0)) && echo passed || echo FAILED) in $(($(date +%s) - STARTED))s:" \
    "$OUTDIR/gpu_check.json"
exit "$rc"

#!/bin/sh
# Every run `decision-rule.md` names, in order, from the repository root:
#
#     sh docs/results/ruling-judge-minilm-l6-distilled-2x/run.sh
#
# Rerun the same command after a kill: the writer, the teacher, the trainer and the evaluator
# resume where they stopped, and a run or an evaluation whose output is complete is skipped. Needs the
# release binaries (`cargo build --release -p ruling-train -p ruling-eval`). Checkpoints and
# per-question results go under target/; the reports to commit are copied beside this file.
set -eu

here=docs/results/ruling-judge-minilm-l6-distilled-2x
bin=target/release
export RULING_CACHE="${RULING_CACHE:-$PWD/target/ruling-cache}"

# The shipped checkpoint's command (docs/encoder.md), without its output and seed.
recipe="--per-source 2000 --cap clinc150=6000 --cap sst5=9645 --cap hwu64=1500 --cap snips=800
  --cap medical-abstracts=300 --cap snli=800 --cap goemotions=1000 --valid-fraction 0.03
  --valid-records 800 --steps 540 --eval-every 90 --warmup 36"
distilled="--data data/distill/answered.jsonl --data data/distill-2/answered.jsonl"

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# train NAME SEED [EXTRA...]: a checkpoint in target/judge/NAME, skipped once it is complete.
train() {
    name=$1 seed=$2
    shift 2
    if [ -f "target/judge/$name/decision.json" ] && [ -f "target/judge/$name/calibration.json" ]; then
        echo "target/judge/$name is trained"
        return
    fi
    step "training $name"
    # shellcheck disable=SC2086 # the recipe is a list of arguments
    $bin/ruling-train encoder --output "target/judge/$name" $recipe --seed "$seed" "$@"
}

# held_out DIR NAME: the held-out report of the checkpoint in DIR, as target/eval/NAME-heldout.
held_out() {
    dir=$1 name=$2 out="target/eval/$2-heldout"
    if [ -f "$out/report.json" ]; then
        echo "$out is evaluated"
        return
    fi
    step "evaluating $name"
    $bin/ruling-eval run --model "encoder:$dir" \
        --dataset clinc150-20,boolq,sst5,ag-news,trec,banking77 --split held-out \
        --limit 1000 --seed 0 --dtype f32 --calibration "$dir/calibration.json" --out "$out"
}

step "writing the set"
$bin/ruling-train distill write --dir data/distill-2 --seed 1
step "answering the set"
$bin/ruling-train distill answer --dir data/distill-2 --backend candle

# Each run is evaluated as soon as it is trained, so a stop between runs keeps a readable report.
mkdir -p target/judge target/eval
held_out models/ruling-judge-minilm-l6 shipped
# shellcheck disable=SC2086
train f2x-seed0 0 $distilled
held_out target/judge/f2x-seed0 f2x-seed0
# shellcheck disable=SC2086
train f2x-seed1 1 $distilled
held_out target/judge/f2x-seed1 f2x-seed1
train shipped-seed1 1
held_out target/judge/shipped-seed1 shipped-seed1

step "comparing"
$bin/ruling-eval compare target/eval/shipped-heldout,target/eval/shipped-seed1-heldout \
    target/eval/f2x-seed0-heldout,target/eval/f2x-seed1-heldout --column answer \
    >"$here/compare-recipes.md"
for seed in 0 1; do
    mkdir -p "$here/seed$seed/held-out"
    cp target/judge/f2x-seed$seed/decision.json target/judge/f2x-seed$seed/calibration.json \
        "$here/seed$seed/"
    cp -r target/eval/f2x-seed$seed-heldout/report.md target/eval/f2x-seed$seed-heldout/report.json \
        target/eval/f2x-seed$seed-heldout/figures "$here/seed$seed/held-out/"
done
# One set against two, reported only, when the one-set runs' results are still on the machine.
if [ -d target/eval/distilled-seed0-heldout ] && [ -d target/eval/distilled-seed1-heldout ]; then
    $bin/ruling-eval compare target/eval/distilled-seed0-heldout,target/eval/distilled-seed1-heldout \
        target/eval/f2x-seed0-heldout,target/eval/f2x-seed1-heldout --column answer \
        >"$here/compare-one-set.md"
fi
cat "$here/compare-recipes.md"

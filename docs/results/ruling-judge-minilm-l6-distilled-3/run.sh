#!/bin/sh
# Every run `decision-rule.md` names, in order, from the repository root:
#
#     sh docs/results/ruling-judge-minilm-l6-distilled-3/run.sh
#
# Rerun the same command after a kill: the teacher, the trainer and the evaluator resume where
# they stopped, and a run or an evaluation whose output is complete is skipped. Needs the
# release binaries (`cargo build --release -p ruling-train -p ruling-eval`). Checkpoints and
# per-question results go under target/; the reports to commit are copied beside this file.
set -eu

here=docs/results/ruling-judge-minilm-l6-distilled-3
bin=target/release
export RULING_CACHE="${RULING_CACHE:-$PWD/target/ruling-cache}"

# The shipped checkpoint's command (docs/encoder.md) with the added sources, long records and
# coherence twins, without its output and seed.
recipe="--datasets all,added --per-source 2000 --cap clinc150=6000 --cap sst5=9645
  --cap hwu64=1500 --cap snips=800 --cap medical-abstracts=300 --cap snli=800 --cap goemotions=1000
  --cap spamassassin=1500 --cap sotu=40 --cap moby-dick=60 --cap logs=2000 --cap udhr=1500
  --cap wordnet=1500 --cap chatterbot=1500 --cap fortunes=1500
  --valid-fraction 0.03 --valid-records 800 --steps 1500 --eval-every 150 --warmup 100
  --max-tokens 4096 --coherence 0.3"
distilled="--data data/distill/answered.jsonl --data data/distill-2/answered.jsonl
  --data data/distill-3/answered.jsonl --data data/distill-3-questions/answered.jsonl"

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# The teacher answers at least 5,000 of the pool's states, then the questions' set, before
# the first run.
answered=$(wc -l < data/distill-3/answered.jsonl)
if [ ! -f target/judge/g-seed0/decision.json ] && [ "$answered" -lt 5000 ]; then
    step "answering the third set ($answered of 6,000 states so far)"
    $bin/ruling-train distill answer --dir data/distill-3 --backend candle --stop-after 5000
fi
if [ ! -f target/judge/g-seed0/decision.json ]; then
    step "answering the questions' set"
    $bin/ruling-train distill answer --dir data/distill-3-questions --backend candle
fi

# train NAME SEED: a checkpoint in target/judge/NAME, skipped once it is complete.
train() {
    name=$1 seed=$2
    if [ -f "target/judge/$name/decision.json" ] && [ -f "target/judge/$name/calibration.json" ]; then
        echo "target/judge/$name is trained"
        return
    fi
    step "training $name"
    # shellcheck disable=SC2086 # the recipe is a list of arguments
    $bin/ruling-train encoder --output "target/judge/$name" $recipe $distilled --seed "$seed"
}

# held_out DIR NAME: the held-out reports of the checkpoint in DIR.
held_out() {
    dir=$1 name=$2 out="target/eval/$2-g-heldout"
    if [ ! -f "$out/report.json" ]; then
        step "evaluating $name"
        $bin/ruling-eval run --model "encoder:$dir" \
            --dataset clinc150-20,boolq,sst5,ag-news,trec,banking77,spamassassin --split held-out \
            --limit 1000 --seed 0 --dtype f32 --calibration "$dir/calibration.json" --out "$out"
    fi
    needles="target/eval/$2-needles"
    if [ ! -f "$needles/report.json" ]; then
        step "needles of $name"
        $bin/ruling-eval run --model "encoder:$dir" --dataset needle-alone,needle-2048,needle-8192 \
            --split held-out --limit 300 --seed 0 --dtype f32 --calibration "$dir/calibration.json" \
            --out "$needles"
    fi
    coherence="target/eval/$2-coherence"
    if [ ! -f "$coherence/report.json" ]; then
        step "coherence of $name"
        $bin/ruling-eval coherence --model "encoder:$dir" --calibration "$dir/calibration.json" \
            --out "$coherence"
    fi
}

mkdir -p target/judge target/eval
held_out models/ruling-judge-minilm-l6 shipped
train g-seed0 0
held_out target/judge/g-seed0 g-seed0
train g-seed1 1
held_out target/judge/g-seed1 g-seed1

step "comparing"
$bin/ruling-eval compare target/eval/shipped-g-heldout \
    target/eval/g-seed0-g-heldout,target/eval/g-seed1-g-heldout --column answer \
    >"$here/compare-recipes.md"
for seed in 0 1; do
    mkdir -p "$here/seed$seed"
    cp target/judge/g-seed$seed/decision.json target/judge/g-seed$seed/calibration.json "$here/seed$seed/"
    for part in g-heldout needles coherence; do
        mkdir -p "$here/seed$seed/$part"
        cp -r "target/eval/g-seed$seed-$part/report.md" "target/eval/g-seed$seed-$part/report.json" \
            "$here/seed$seed/$part/"
    done
done
cat "$here/compare-recipes.md"

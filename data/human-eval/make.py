"""Correct and broken solutions of HumanEval, proven by running each problem's own tests.

Reads shared/datasets/human_eval/HumanEval.jsonl.gz (beside the repository, or $RULING_DATASETS)
and writes solutions.jsonl here: for every problem its canonical solution (kept only if its
tests pass) and up to two broken ones, each a single small edit of the canonical body (a
comparison, an arithmetic operator, a constant, a boolean) whose tests then fail. Every
program runs in its own Python process with a time limit, so a mutant that loops is dropped,
not waited on. Deterministic: the edits are tried in a fixed order.

    python3 data/human-eval/make.py
"""
import gzip, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("RULING_DATASETS") or os.path.join(HERE, "..", "..", "..", "shared", "datasets")
SOURCE = os.path.join(ROOT, "human_eval", "HumanEval.jsonl.gz")

# (pattern, replacement, what the edit does), tried in this order on the body only.
EDITS = [
    (r"<=", "<", "<= became <"),
    (r">=", ">", ">= became >"),
    (r"(?<![<>=!])<(?![<=])", "<=", "< became <="),
    (r"(?<![<>=!-])>(?![>=])", ">=", "> became >="),
    (r"==", "!=", "== became !="),
    (r"!=", "==", "!= became =="),
    (r"\+ 1\b", "", "+ 1 removed"),
    (r"- 1\b", "", "- 1 removed"),
    (r"(?<![+\-*/=<>!])\+(?![+=])", "-", "+ became -"),
    (r"(?<![+\-*/=<>!])-(?![\-=>])(?=\s)", "+", "- became +"),
    (r"\bTrue\b", "False", "True became False"),
    (r"\bFalse\b", "True", "False became True"),
    (r"\band\b", "or", "and became or"),
    (r"\bor\b", "and", "or became and"),
    (r"\b0\b", "1", "0 became 1"),
    (r"\b1\b", "2", "1 became 2"),
    (r"\[1:\]", "[2:]", "[1:] became [2:]"),
    (r"\[::-1\]", "", "[::-1] removed"),
]


def passes(program, timeout=10):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
        path = f.name
    try:
        done = subprocess.run([sys.executable, path], capture_output=True, timeout=timeout)
        return done.returncode == 0
    except subprocess.TimeoutExpired:
        return None
    finally:
        os.unlink(path)


def program(problem, body):
    return problem["prompt"] + body + "\n\n" + problem["test"] + f"\ncheck({problem['entry_point']})\n"


def main():
    out = []
    with gzip.open(SOURCE, "rt") as f:
        problems = [json.loads(line) for line in f]
    for n, problem in enumerate(problems):
        body = problem["canonical_solution"]
        if not passes(program(problem, body)):
            print(f"{problem['task_id']}: canonical solution fails its tests; skipped", file=sys.stderr)
            continue
        out.append({"task_id": problem["task_id"], "code": problem["prompt"] + body, "passes": True, "edit": None})
        broken = 0
        for pattern, replacement, what in EDITS:
            if broken == 2:
                break
            match = re.search(pattern, body)
            if not match:
                continue
            mutant = body[: match.start()] + match.expand(replacement) + body[match.end():]
            if mutant == body or passes(program(problem, mutant)) is not False:
                continue
            out.append({"task_id": problem["task_id"], "code": problem["prompt"] + mutant, "passes": False, "edit": what})
            broken += 1
        print(f"{n + 1}/{len(problems)} {problem['task_id']}: {broken} broken", file=sys.stderr)
    tmp = os.path.join(HERE, "solutions.jsonl.tmp")
    with open(tmp, "w") as f:
        for row in out:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(HERE, "solutions.jsonl"))
    print(f"{sum(r['passes'] for r in out)} correct, {sum(not r['passes'] for r in out)} broken", file=sys.stderr)


if __name__ == "__main__":
    main()

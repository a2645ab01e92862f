# Sourced after bench/preamble.sh with `n` set: n trivial stdout tasks in $work. Task i prints i;
# its sample is the program `print(i)` (a whole program: no completion prefix). Writes
# tasks.jsonl and samples.jsonl (for `codegym evaluate`) and programs.txt (one program a line, for
# bench/naive.py and the HTTP drivers).
"$python" - "$n" "$work" <<'PY'
import json, sys
n, work = int(sys.argv[1]), sys.argv[2]
with open(f"{work}/tasks.jsonl", "w") as t, open(f"{work}/samples.jsonl", "w") as s, \
        open(f"{work}/programs.txt", "w") as p:
    t.write(json.dumps({"schema_version": 1, "name": "trivial", "description": "print(i)"}) + "\n")
    for i in range(n):
        t.write(json.dumps({"id": f"t{i}", "prompt": f"Print {i}.",
                            "reward": {"version": 1, "components": [{"type": "stdout", "expected": f"{i}\n"}]}}) + "\n")
        s.write(json.dumps({"task_id": f"t{i}", "completion": f"print({i})\n"}) + "\n")
        p.write(f"print({i})\n")
PY

"""One instance evaluated the way the published evaluator runs it, for `eval_speed.py`'s
baseline: a fresh Python process per instance, a full copy of the database per phase, the
two phases (issue SQL, then the prediction) run serially. Reads one JSON job on stdin and
prints one JSON result; the scoring code is birdrl's, so only the execution model differs.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from birdrl.evaluation.runner import PhaseJob, run_phase


def main() -> None:
    job = json.load(sys.stdin)
    task = job["task"]
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for sql in (task["issue_sql"], job["pred_sqls"]):
            db = Path(tmp) / "instance.sqlite"
            shutil.copy2(job["template"], db)  # a fresh copy per phase
            out = run_phase(
                PhaseJob(
                    db_path=str(db),
                    sql=tuple(sql),
                    sol_sql=tuple(task["sol_sql"]),
                    preprocess_sql=tuple(task["preprocess_sql"]),
                    clean_up_sql=tuple(task["clean_up_sql"]),
                    test_cases=tuple(task["test_cases"]),
                    conditions=task["conditions"],
                )
            )
            results.append(out.passed == out.tests_run and out.tests_run > 0)
    print(json.dumps({"issue_passed": results[0], "passed": results[1]}))


if __name__ == "__main__":
    main()

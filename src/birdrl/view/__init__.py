"""`birdrl view`: a static, offline site for looking into evaluations and training runs.

`sources` reads run artifacts (a curriculum run directory, a trajectories JSONL, a
``--json`` report) into plain records; `site` writes them as lazily loaded data files next
to a small vanilla-JS app that opens from disk."""

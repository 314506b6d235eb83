"""birdrl's SQL-Act environment under the verifiers id ``birdrl-sqlact``.

verifiers imports an environment id as a top-level module and takes the `Taskset` and
`Env` it exports; the code is `birdrl.training.verifiers` (needs ``birdrl[verifiers]``).
"""

from birdrl.training.verifiers import SQLActTaskset, SQLActVerifiersEnv, load_environment

__all__ = ["SQLActTaskset", "SQLActVerifiersEnv", "load_environment"]

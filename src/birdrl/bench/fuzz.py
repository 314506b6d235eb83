"""The hostile pool fuzzer: concurrent trajectories attack their replicas the way a policy in
training does, and every grant is compared with its template.

Each trajectory acquires a replica of a random database, is fingerprinted over an admin
connection the moment it is granted (`FuzzTarget.observe`, compared part by part with
`FuzzTarget.expected`), then runs 1-6 random mutations: half through `Lease.execute` (the
sandbox), half through a trusted connection of its own inside `Lease.trusted` (as test cases
and trainers write). A few leases are abandoned to the TTL, half of them with a transaction
left open. A grant whose fingerprint differs from its template is *contaminated*; an acquire
(or the first statement of a grant) that raises is a *failed acquire*. Both must stay 0.

The engine-specific parts (templates, mutation catalogues, fingerprints) are the targets in
`birdrl.bench.fuzz_mysql` and `birdrl.bench.fuzz_postgres`; `benchmarks/pool_fuzz.py` runs
them at scale, the tests in short runs with a meta-test that a no-op restore is caught.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from birdrl.db.errors import LeaseClosedError, PoolError
from birdrl.db.lease import Lease
from birdrl.db.pool import ReplicaPool

__all__ = ["FuzzConfig", "FuzzReport", "FuzzTarget", "insert_rows", "run_fuzz", "template_rows"]

Fingerprint = Mapping[str, str]
"""Part name (``database``, ``table orders``, ``stats`` ...) -> digest of that part."""


def template_rows(
    seed: int, rows: int = 60
) -> list[tuple[str, tuple[str, ...], list[tuple[object, ...]]]]:
    """The rows of the fuzzer's template (the same on every engine), in an order that
    satisfies its foreign keys: (table, columns, rows)."""
    rnd = random.Random(seed)
    regions = [(r,) for r in ("north", "south", "east", "west")]
    cities = ["Oslo", "oslo", "Lima", None]
    customers = [(f"c{i}", rnd.randint(1, 4), rnd.choice(cities)) for i in range(rows // 3)]
    products = [(f"P{i:04d}", round(rnd.uniform(1, 90), 2)) for i in range(rows // 4)]
    dates = [None, "2024-02-29", "2023-12-31"]
    orders = [
        (rnd.randint(1, rows // 3), round(rnd.uniform(0, 500), 2), rnd.choice(dates))
        for _ in range(rows)
    ]
    items: dict[tuple[int, int], int] = {}
    for _ in range(rows):  # the first of each (order, product) pair
        key = (rnd.randint(1, rows), rnd.randint(1, rows // 4))
        items.setdefault(key, rnd.randint(1, 5))
    payments = [(rnd.randint(1, rows), round(rnd.uniform(0, 500), 2)) for _ in range(rows // 2)]
    suppliers = [(f"s{i}", rnd.randint(1, 5)) for i in range(5)]
    stock = [(p, rnd.randint(1, 5), rnd.randint(0, 50)) for p in range(1, rows // 4 + 1)]
    events = [(i, rnd.choice(["new", "old"]), "2024-01-01 10:00:00") for i in range(8)]
    return [
        ("region", ("name",), list(regions)),
        ("customer", ("name", "region_id", "city"), list(customers)),
        ("product", ("sku", "price"), list(products)),
        ("orders", ("customer_id", "amount", "placed"), list(orders)),
        ("order_item", ("order_id", "product_id", "qty"), [(*k, q) for k, q in items.items()]),
        ("payment", ("order_id", "paid"), list(payments)),
        ("supplier", ("name", "rating"), list(suppliers)),
        ("stock", ("product_id", "supplier_id", "units"), list(stock)),
        ("audit", ("note",), [("loaded",), ("checked",)]),
        ("events", ("id", "kind", "at"), list(events)),
    ]


def insert_rows(cur: Any, seed: int) -> None:
    """Insert `template_rows` with a DB-API cursor (``%s`` placeholders)."""
    for table, columns, values in template_rows(seed):
        marks = ", ".join(["%s"] * len(columns))
        cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", values)


def open_transaction(rnd: random.Random, traj: str) -> list[str]:
    """Statements that leave a transaction with writes open in the sandbox (the same on
    every engine): what a lease abandoned to the TTL may still hold."""
    return [
        "BEGIN",
        f"INSERT INTO audit (note) VALUES ('open {traj}')",
        f"UPDATE customer SET city = 'T' WHERE id = {rnd.randint(1, 20)}",
    ]


class FuzzTarget(Protocol):
    """One engine's side of the fuzzer."""

    db_ids: tuple[str, ...]

    def expected(self, db_id: str) -> Fingerprint:
        """What every grant of `db_id` must show (the template, seen as a replica is)."""

    def observe(self, lease: Lease) -> Fingerprint:
        """The leased replica as it is now, read over an admin connection."""

    def sandboxed(self, rnd: random.Random, traj: str, lease: Lease) -> str:
        """One random statement (or script) for `Lease.execute`."""

    def trusted(self, rnd: random.Random, traj: str, lease: Lease) -> str:
        """Run one random mutation over a trusted connection (the caller holds
        `Lease.trusted`); returns what it ran, for the tally."""


@dataclass(frozen=True)
class FuzzConfig:
    """The workload's shape (defaults: the issue-49 workload)."""

    trajectories: int = 3000
    threads: int = 4
    abandon_rate: float = 0.03
    """Share of leases left to the TTL (half of them with an open transaction)."""
    trusted_share: float = 0.5
    """Share of mutations run over a trusted connection instead of the sandbox."""
    mutations: tuple[int, int] = (1, 6)
    acquire_timeout_s: float = 120.0
    seed: int = 0


@dataclass
class FuzzReport:
    """What a run did and found."""

    trajectories: int = 0
    grants: int = 0
    contaminated: int = 0
    failed_acquires: int = 0
    sandboxed: int = 0
    trusted: int = 0
    abandoned: int = 0
    expired_mid_trajectory: int = 0
    errors: int = 0
    """Trajectories that raised something the fuzzer did not expect (a bug to look at)."""
    restores: int = 0
    verify_failures: int = 0
    """Restores whose result did not check out against the template and were redone."""
    seconds: float = 0.0
    parts: Counter[str] = field(default_factory=Counter)
    """How often each fingerprint part differed on a contaminated grant."""
    examples: list[str] = field(default_factory=list)
    """The first problems, in words."""

    @property
    def clean(self) -> bool:
        return self.contaminated == 0 and self.failed_acquires == 0 and self.errors == 0

    def summary(self) -> str:
        lines = [
            f"trajectories {self.trajectories}, grants {self.grants}, "
            f"contaminated {self.contaminated}, failed acquires {self.failed_acquires}, "
            f"errors {self.errors}",
            f"mutations: {self.sandboxed} sandboxed, {self.trusted} trusted; "
            f"abandoned {self.abandoned}; expired mid-trajectory {self.expired_mid_trajectory}; "
            f"restores {self.restores} ({self.verify_failures} redone after their check); "
            f"{self.seconds:.0f} s",
        ]
        if self.parts:
            lines.append(
                "differing parts: " + ", ".join(f"{p} {n}" for p, n in self.parts.most_common(8))
            )
        lines += [f"  {e}" for e in self.examples]
        return "\n".join(lines)


_EXAMPLES = 12


def _where(lease: Lease) -> str:
    """The replica of `lease`, named without credentials."""
    return str(getattr(lease.replica, "dbname", None) or lease.replica)


def run_fuzz(
    pool: ReplicaPool,
    target: FuzzTarget,
    config: FuzzConfig,
    *,
    progress: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Run `config.trajectories` trajectories over `pool` on `config.threads` threads;
    `progress` sees the report so far after each trajectory."""
    report = FuzzReport()
    expected = {db_id: dict(target.expected(db_id)) for db_id in target.db_ids}
    lock = threading.Lock()
    counter = iter(range(config.trajectories))
    restores_before = sum(r.restores for r in pool.replicas())
    redone_before = sum(getattr(r, "verify_failures", 0) for r in pool.replicas())

    def note(kind: str, text: str, parts: list[str] | None = None) -> None:
        with lock:
            if kind == "contaminated":
                report.contaminated += 1
                report.parts.update(parts or ())
            elif kind == "error":
                report.errors += 1
            else:
                report.failed_acquires += 1
            if len(report.examples) < _EXAMPLES:
                report.examples.append(f"{kind}: {text}")

    def one(n: int) -> None:
        rnd = random.Random(config.seed * 1_000_003 + n)
        db_id = rnd.choice(target.db_ids)
        traj = f"fz{config.seed}-{n}"
        try:
            lease = pool.acquire(traj, db_id, timeout=config.acquire_timeout_s)
        except PoolError as exc:
            note("failed acquire", f"{traj} on {db_id}: {type(exc).__name__}: {exc}")
            return
        with lock:
            report.grants += 1
        seen = target.observe(lease)
        want = expected[db_id]
        differ = sorted(p for p in want.keys() | seen.keys() if want.get(p) != seen.get(p))
        if differ:
            note("contaminated", f"{traj} got {_where(lease)}: {differ}", differ)
        sandboxed = trusted = 0
        try:
            try:  # the grant's first statement: a replica that cannot be reached is a failure
                lease.execute("SELECT 1")
            except LeaseClosedError:
                raise
            except PoolError as exc:
                note("failed acquire", f"{traj} on {db_id}: {type(exc).__name__}: {exc}")
                pool.release(traj)
                return
            for _ in range(rnd.randint(*config.mutations)):
                if rnd.random() < config.trusted_share:
                    with lease.trusted():
                        target.trusted(rnd, traj, lease)
                    trusted += 1
                else:
                    lease.execute(target.sandboxed(rnd, traj, lease))
                    sandboxed += 1
            if rnd.random() < config.abandon_rate:
                if rnd.random() < 0.5:
                    for statement in open_transaction(rnd, traj):
                        lease.execute(statement)
                with lock:
                    report.abandoned += 1
            else:
                pool.release(traj)
        except LeaseClosedError:  # the TTL reclaimed it while this trajectory worked
            with lock:
                report.expired_mid_trajectory += 1
        except PoolError:  # its own doing (it dropped its database, then reconnected)
            pool.release(traj)
        finally:
            with lock:
                report.sandboxed += sandboxed
                report.trusted += trusted

    def worker() -> None:
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            try:
                one(n)
            except Exception as exc:  # noqa: BLE001 - the run goes on; the report shows it
                note("error", f"trajectory {n}: {type(exc).__name__}: {exc}")
            with lock:
                report.trajectories += 1
                if progress is not None:
                    progress(report)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(config.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.reap_expired()
    report.seconds = time.monotonic() - t0
    report.restores = sum(r.restores for r in pool.replicas()) - restores_before
    redone = sum(getattr(r, "verify_failures", 0) for r in pool.replicas())
    report.verify_failures = redone - redone_before
    return report

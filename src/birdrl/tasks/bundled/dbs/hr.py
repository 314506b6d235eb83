"""hr: a software company's people data — org chart, salary history, projects, timesheets."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "hr"
SEED = 20240630_5
DESCRIPTION = (
    "A software company's HR data (synthetic): a department tree (parent_department_id), "
    "jobs with salary bands, employees with a manager hierarchy (manager_id, recursive), "
    "salary history rows (effective_from/effective_to, NULL = current), projects, project "
    "assignments (employees and projects many-to-many) and weekly timesheets with a "
    "composite foreign key to the assignment. Quirks: contractors with NULL department, "
    "a department with no employees, terminated employees (termination_date) some still "
    "listed as managers, commission_pct NULL outside sales, whole-number allocation_pct, "
    "a few employees with two open (effective_to NULL) salary rows."
)
TABLES = (
    "departments",
    "jobs",
    "employees",
    "salaries",
    "projects",
    "project_assignments",
    "timesheets",
)

N_STAFF = 1150
N_CONTRACTORS = 30
N_PROJECTS = 60
N_DOUBLE_OPEN_SALARY = 5

# name -> (parent, location, head's job)
DEPARTMENTS = {
    "Executive": (None, "Dublin", "CEO"), "Engineering": ("Executive", "Dublin", "VP"),
    "Platform": ("Engineering", "Dublin", "DIR"), "Data": ("Engineering", "Berlin", "DIR"),
    "Mobile": ("Engineering", "Lisbon", "DIR"), "Security": ("Engineering", None, "DIR"),
    "Research": ("Engineering", "Berlin", None), "Product": ("Executive", "Dublin", "VP"),
    "Sales": ("Executive", "London", "VP"), "Sales EMEA": ("Sales", "London", "DIR"),
    "Sales Americas": ("Sales", "New York", "DIR"), "Marketing": ("Executive", "London", "VP"),
    "Customer Support": ("Executive", "Lisbon", "VP"), "Finance": ("Executive", "Dublin", "VP"),
    "People": ("Executive", "Dublin", "DIR"), "Legal": ("Executive", "Dublin", "DIR"),
}  # fmt: skip
JOBS = {
    "CEO": ("Chief Executive Officer", 220000, 400000), "VP": ("Vice President", 160000, 260000),
    "DIR": ("Director", 130000, 200000), "MGR": ("Manager", 90000, 150000),
    "ENG1": ("Software Engineer I", 50000, 75000), "ENG2": ("Software Engineer II", 65000, 95000),
    "ENG3": ("Senior Software Engineer", 85000, 130000), "ENG4": ("Staff Engineer", 115000, 170000),
    "DS": ("Data Scientist", 70000, 120000), "PM": ("Product Manager", 75000, 135000),
    "AE": ("Account Executive", 45000, 90000), "SDR": ("Sales Development Rep", 35000, 55000),
    "MKT": ("Marketing Specialist", 45000, 80000), "SUP": ("Support Engineer", 38000, 62000),
    "FIN": ("Financial Analyst", 50000, 90000), "HRG": ("HR Generalist", 45000, 75000),
    "LAW": ("Legal Counsel", 90000, 160000), "CON": ("Contractor", 30000, 120000),
}  # fmt: skip
# staffed department -> (relative size, {job: weight})
STAFF = {
    "Platform": (20, {"ENG1": 2, "ENG2": 4, "ENG3": 3, "ENG4": 1}),
    "Data": (10, {"ENG2": 2, "ENG3": 2, "DS": 4}),
    "Mobile": (10, {"ENG1": 2, "ENG2": 3, "ENG3": 2}),
    "Security": (4, {"ENG2": 1, "ENG3": 2, "ENG4": 1}),
    "Product": (7, {"PM": 1}),
    "Sales EMEA": (10, {"AE": 3, "SDR": 2}),
    "Sales Americas": (9, {"AE": 3, "SDR": 2}),
    "Marketing": (7, {"MKT": 1}),
    "Customer Support": (14, {"SUP": 1}),
    "Finance": (4, {"FIN": 1}),
    "People": (3, {"HRG": 1}),
    "Legal": (2, {"LAW": 1}),
}
PROJECT_WORDS = (
    "Atlas", "Beacon", "Cascade", "Delta", "Ember", "Falcon", "Granite", "Helix", "Ion", "Juniper",
    "Kestrel", "Lumen", "Mosaic", "Nimbus", "Orion", "Pulse", "Quartz", "Relay", "Sextant",
    "Tundra",
)  # fmt: skip
PROJECT_KINDS = ("Migration", "Redesign", "Launch", "Audit", "Platform", "Rollout", "Pilot")
ROLES = {"developer": 50, "analyst": 15, "designer": 8, "reviewer": 10, "tester": 12, "advisor": 5}


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first (managers before their reports), from the fixed seed."""
    rnd = random.Random(SEED)
    names = list(DEPARTMENTS)
    dept_id = {name: i for i, name in enumerate(names, 1)}
    insert(
        conn,
        "departments",
        ("department_id", "name", "parent_department_id", "location", "cost_center"),
        [
            (dept_id[n], n, _parent_id(dept_id, n), DEPARTMENTS[n][1], f"CC-{100 + 10 * i}")
            for i, n in enumerate(names)
        ],
    )
    insert(
        conn,
        "jobs",
        ("job_id", "title", "min_salary", "max_salary"),
        [(j, t, float(lo), float(hi)) for j, (t, lo, hi) in JOBS.items()],
    )
    employees = _employees(rnd, dept_id)
    insert(
        conn,
        "employees",
        (
            "employee_id",
            "first_name",
            "last_name",
            "email",
            "phone",
            "hire_date",
            "termination_date",
            "job_id",
            "department_id",
            "manager_id",
            "commission_pct",
        ),
        employees,
    )
    insert(
        conn,
        "salaries",
        ("employee_id", "effective_from", "effective_to", "amount"),
        _salaries(rnd, employees),
    )
    _projects(conn, rnd, employees, dept_id)


def _parent_id(dept_id: dict[str, int], name: str) -> int | None:
    parent = DEPARTMENTS[name][0]
    return dept_id[parent] if parent else None


def _employees(rnd: random.Random, dept_id: dict[str, int]) -> list[tuple]:
    rows: list[tuple] = []
    head: dict[str, int] = {}
    managers: dict[str, list[int]] = {}

    def add(job: str, dept: str | None, manager: int | None, hired: date, p_leave: float) -> int:
        first, last = fake.person(rnd)
        employee_id = len(rows) + 1
        left = None
        if rnd.random() < p_leave:
            left = fake.day_between(
                rnd, min(hired + timedelta(days=90), fake.SNAPSHOT_DATE), fake.SNAPSHOT_DATE
            )
        email: str | None = fake.email(rnd, first, last, employee_id, "corp.example.com")
        if left is not None and rnd.random() < 0.5:
            email = None  # mailbox deleted
        commission = None
        if job in ("AE", "SDR"):
            commission = 0.05 if job == "SDR" else round(rnd.uniform(0.08, 0.2), 3)
        rows.append(
            (
                employee_id,
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                email,
                fake.maybe(rnd, fake.phone(rnd), 0.1),
                fake.iso_day(hired),
                fake.iso_day(left) if left else None,
                job,
                dept_id[dept] if dept else None,
                manager,
                commission,
            )
        )
        return employee_id

    for name, (parent, _loc, job) in DEPARTMENTS.items():
        if job is None:
            continue
        hired = fake.day_between(rnd, date(2008, 3, 3), date(2016, 12, 31))
        head[name] = add(job, name, head.get(parent) if parent else None, hired, 0.0)
    weights = {name: size for name, (size, _) in STAFF.items()}
    total = sum(weights.values())
    for name, (size, _) in STAFF.items():
        for _ in range(1 + N_STAFF * size // total // 9):
            hired = fake.day_between(rnd, date(2010, 1, 4), date(2022, 12, 30))
            managers.setdefault(name, []).append(add("MGR", name, head[name], hired, 0.05))
    for _ in range(N_STAFF - len(rows)):
        name = fake.weighted(rnd, weights)
        job = fake.weighted(rnd, STAFF[name][1])
        hired = fake.day_between(rnd, date(2010, 1, 4), date(2024, 6, 14))
        add(job, name, rnd.choice(managers[name]), hired, 0.15)
    for _ in range(N_CONTRACTORS):
        hired = fake.day_between(rnd, date(2019, 1, 7), date(2024, 6, 14))
        add("CON", None, head[rnd.choice(("Engineering", "Platform", "Data"))], hired, 0.25)
    return rows


def _salaries(rnd: random.Random, employees: list[tuple]) -> list[tuple]:
    rows = []
    doubled = set(rnd.sample(range(1, len(employees) + 1), N_DOUBLE_OPEN_SALARY))
    for e in employees:
        _title, lo, hi = JOBS[e[7]]
        amount = round(rnd.uniform(lo, lo + (hi - lo) * 0.5), -2)
        start = date.fromisoformat(e[5])
        end = date.fromisoformat(e[6]) if e[6] else None
        history = []
        while True:
            history.append((start, amount))
            start = start + timedelta(days=rnd.randint(300, 600))
            if start > (end or fake.SNAPSHOT_DATE):
                break
            amount = round(min(hi * 1.05, amount * rnd.uniform(1.02, 1.09)), -2)
        for k, (since, pay) in enumerate(history):
            until = history[k + 1][0] - timedelta(days=1) if k + 1 < len(history) else end
            if e[0] in doubled and k == len(history) - 2 and not end:
                until = None  # the old rate was never closed
            rows.append((e[0], fake.iso_day(since), fake.iso_day(until) if until else None, pay))
    return rows


def _projects(
    conn: sqlite3.Connection, rnd: random.Random, employees: list[tuple], dept_id: dict[str, int]
) -> None:
    project_depts = ["Platform", "Data", "Mobile", "Security", "Product", "Marketing"]
    projects: list[tuple] = []
    assignments: list[tuple] = []
    timesheets: list[list] = []
    names = rnd.sample([f"{w} {k}" for w in PROJECT_WORDS for k in PROJECT_KINDS], N_PROJECTS)
    for project_id, name in enumerate(names, 1):
        dept = rnd.choice(project_depts)
        start = fake.day_between(rnd, date(2018, 1, 1), date(2024, 5, 1))
        planned_end = start + timedelta(days=rnd.randint(60, 700))
        ongoing = planned_end > fake.SNAPSHOT_DATE or rnd.random() < 0.15
        end = None if ongoing else planned_end
        budget = fake.maybe(rnd, float(rnd.randint(5, 400) * 5000), 0.1)
        projects.append(
            (
                project_id,
                f"PRJ-{project_id:04d}",
                name,
                dept_id[dept],
                fake.iso_day(start),
                fake.iso_day(end) if end else None,
                budget,
            )
        )
        stop = end or fake.SNAPSHOT_DATE
        eligible = [
            e
            for e in employees
            if (e[8] == dept_id[dept] or (e[8] is None and rnd.random() < 0.2))
            and e[5] <= fake.iso_day(stop)
            and (e[6] is None or e[6] >= fake.iso_day(start))
        ]
        team = rnd.sample(eligible, min(len(eligible), rnd.randint(4, 22)))
        for k, e in enumerate(sorted(team)):
            joined = max(start, date.fromisoformat(e[5])) + timedelta(days=rnd.randint(0, 20))
            role = "lead" if k == 0 else fake.weighted(rnd, ROLES)
            alloc = rnd.choice((10, 20, 25, 40, 50, 50, 80, 100))
            assignments.append((project_id, e[0], role, alloc, fake.iso_day(joined)))
            last = min(stop, date.fromisoformat(e[6]) if e[6] else stop)
            friday = joined + timedelta(days=(4 - joined.weekday()) % 7)
            while friday <= last:
                if rnd.random() > 0.08:  # weeks off
                    hours = min(80.0, round(alloc * 0.4 * rnd.uniform(0.7, 1.3) * 2) / 2 or 0.5)
                    recent = (fake.SNAPSHOT_DATE - friday).days < 21
                    timesheets.append(
                        [
                            e[0],
                            project_id,
                            fake.iso_day(friday),
                            hours,
                            int(not recent or rnd.random() < 0.5),
                        ]
                    )
                friday += timedelta(days=7)
    insert(
        conn,
        "projects",
        ("project_id", "code", "name", "department_id", "start_date", "end_date", "budget"),
        projects,
    )
    insert(
        conn,
        "project_assignments",
        ("project_id", "employee_id", "role", "allocation_pct", "assigned_on"),
        assignments,
    )
    timesheets.sort(key=lambda t: (t[2], t[0], t[1]))  # entered week by week
    insert(
        conn,
        "timesheets",
        ("timesheet_id", "employee_id", "project_id", "week_ending", "hours", "approved"),
        [(i, *t) for i, t in enumerate(timesheets, 1)],
    )
